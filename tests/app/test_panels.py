"""components.panels.draw_intro and the pages' prose: formulas render as math, never as raw ``Σ_{t<T}`` text."""

from __future__ import annotations

import ast
import re

from tests.app.conftest import ROOT, open_script

SHOWN_BY = {"markdown", "caption", "info", "warning", "write", "draw_intro", "first_paint", "subheader", "success"}
MATH = re.compile(r"\$[^$]+\$")


def _shown_strings(path) -> list[str]:
    """The string literals a page or component passes to a call that shows them as markdown."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            if name in SHOWN_BY:
                for arg in [*node.args, *(k.value for k in node.keywords)]:
                    found += [
                        n.value for n in ast.walk(arg) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                    ]
    return found


def test_no_shown_text_has_a_raw_subscript_or_superscript() -> None:
    files = [*sorted((ROOT / "pages").glob("*.py")), *sorted((ROOT / "components").glob("*.py")), ROOT / "app.py"]
    raw = []
    for path in files:
        for text in _shown_strings(path):
            outside = MATH.sub("", text)
            if "_{" in outside or "^{" in outside:
                raw.append(f"{path.name}: {text[:60]}")
    assert not raw, raw


def test_the_dual_path_definition_renders_as_math(tiny_app) -> None:
    at = open_script(str(ROOT / "pages" / "1_Dual_Path.py"), 120)
    precise = next(m.value for m in at.markdown if "first $T$ answer tokens" in m.value)
    assert r"$Z = \sum_{t<T} \mathrm{KL}_t$" in precise and "Σ_{" not in precise


def _headline_script(joint: dict | None) -> None:
    from components.panels import draw_headline
    from core.engine.axes import Axis, Headline

    rel = Axis("context_reliance", "mixed", 0.59, 0.65, (0.37, 0.65), "higher = read", {})
    sup = Axis("parametric_support", "mixed", -1.83, -2.36, (-2.40, -1.81), "higher = supported", {})
    draw_headline(Headline("inconclusive", None, "Mixed evidence.", rel, sup, "test", joint))


def test_draw_headline_shows_the_joint_resolver_only_when_it_was_consulted() -> None:
    from streamlit.testing.v1 import AppTest

    joint = {"score": 0.72, "threshold": 0.46, "band": [0.42, 0.79], "decided": False}
    at = AppTest.from_function(_headline_script, args=(joint,)).run()
    assert not at.exception
    assert any("P(read) 0.72, inconclusive band [0.42, 0.79]" in c.value for c in at.caption)
    at = AppTest.from_function(_headline_script, args=(None,)).run()
    assert not at.exception and not any("weighed together" in c.value for c in at.caption)
