"""components.frame (issue 27): every page draws its title and intro before it imports its libraries, its title
and inputs before it first waits for the model, and (components.prologue) the inputs that need no model before
its libraries too."""

from __future__ import annotations

import ast
import sys

import pytest
from streamlit.testing.v1 import AppTest

from components import page
from tests.app.conftest import APP, ROOT, ok
from tests.unit.components.test_prologue import LIGHT as EARLY

PAGES = sorted((ROOT / "pages").glob("*.py"))
LIGHT = {"__future__", "streamlit", "components.frame"}
TITLES = {
    "1_Dual_Path.py": "Dual Path",
    "2_Attention.py": "Attention",
    "3_Layer_Trajectories.py": "Layer trajectories",
    "4_Vocabulary_Lens.py": "Vocabulary lens",
    "5_Ablations.py": "Ablations",
    "6_Self_Critique.py": "Self-Critique",
    "7_Source_Attribution.py": "Source Attribution (SMA)",
    "8_RADAR.py": "RADAR: recall or reasoning?",
    "9_Evaluate.py": "Evaluate",
    "10_Audit_Log.py": "Audit log",
}
QUERY = ("text_area", "ror.w.query")
INPUTS = {
    "1_Dual_Path.py": QUERY,
    "5_Ablations.py": QUERY,
    "6_Self_Critique.py": QUERY,
    "7_Source_Attribution.py": QUERY,
    "8_RADAR.py": QUERY,  # before any run
    "9_Evaluate.py": ("radio", "ror.w.eval.source"),
}
"""The pages' first input, drawn before the model is needed: ``(kind of widget, key)``."""
SHARED_INPUTS = ("1_Dual_Path.py", "5_Ablations.py", "6_Self_Critique.py", "7_Source_Attribution.py")
EARLY_PAGES = {
    **dict.fromkeys(SHARED_INPUTS, "with_inputs=True"),
    "8_RADAR.py": "typed_prompt()",
    "9_Evaluate.py": "draw_data_choice()",
    "10_Audit_Log.py": "draw_source()",
}
"""The pages whose inputs need neither the model nor a stored run, drawn before the page's libraries: the call
that draws them."""


def _imported(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        return [node.module or ""] if node.module != "components" else [f"components.{a.name}" for a in node.names]
    return []


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_a_page_imports_only_streamlit_and_the_frame_before_its_first_paint(path) -> None:
    body = ast.parse(path.read_text(encoding="utf-8")).body
    paint = [
        i
        for i, node in enumerate(body)
        if isinstance(node, ast.Expr) and "first_paint" in ast.unparse(node.value).split("(")[0]
    ]
    assert len(paint) == 1, "one frame.first_paint(...) call at the module's top level"
    before = {name for node in body[: paint[0]] for name in _imported(node)}
    assert before <= LIGHT, before - LIGHT
    assert any(_imported(node) for node in body[paint[0] :]), "the libraries come after the first paint"


@pytest.mark.parametrize("name", sorted(TITLES), ids=str)
def test_a_page_draws_its_title_and_inputs_while_the_model_loads(model_never_ready, name) -> None:
    at = AppTest.from_file(APP, default_timeout=120)
    ok(at.run())
    ok(at.switch_page(f"pages/{name}").run())
    assert not page._load_handle.is_loaded("embedded", None)
    assert [t.value for t in at.title] == [TITLES[name]]
    assert any(e.label == "Precisely" for e in at.expander), "the intro"
    if name in INPUTS:
        kind, key = INPUTS[name]
        assert getattr(at, kind)(key=key) is not None  # raises KeyError when it is not on the page


@pytest.mark.parametrize(("name", "inputs"), EARLY_PAGES.items())
def test_a_page_draws_its_inputs_before_its_first_heavy_import(name, inputs) -> None:
    body = ast.parse((ROOT / "pages" / name).read_text(encoding="utf-8")).body
    allowed = {"__future__", "streamlit", *EARLY}
    first_heavy = next(
        i
        for i, node in enumerate(body)
        if {name for name in _imported(node) if name.split(".")[0] not in sys.stdlib_module_names} - allowed
    )
    early = [ast.unparse(node) for node in body[:first_heavy]]
    (begin,) = [line for line in early if "prologue.begin(" in line]  # before the page's libraries
    assert any(inputs in line for line in early[early.index(begin) :]), "the inputs come after begin() and early"
    assert any("early=early" in ast.unparse(node) for node in body[first_heavy:]), "open_page gets what was drawn"
