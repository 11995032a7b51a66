"""app.py: the navigation names the landing page (not "app") and keeps every view's URL."""

from __future__ import annotations

import ast

from tests.app.conftest import APP, ROOT, open_script

TIMEOUT = 120


def test_the_landing_page_has_a_name_and_the_views_keep_their_urls() -> None:
    at = open_script(APP, TIMEOUT)
    pages = list(at._registered_pages.values())  # what st.navigation registered (AppTest keeps no public list)
    names = [p["page_name"] for p in pages]
    assert names[0] == "Start" and "app" not in names, names
    views = sorted((ROOT / "pages").glob("[0-9]*_*.py"), key=lambda p: int(p.stem.split("_", 1)[0]))
    assert [p["url_pathname"] for p in pages[1:]] == [v.stem.split("_", 1)[1] for v in views]
    assert at.title[0].value == "Read or Recall"
    at.switch_page("pages/1_Dual_Path.py").run()
    assert at.title[0].value == "Dual Path"
    at.switch_page("app.py").run()
    assert at.title[0].value == "Read or Recall", "switch_page('app.py') still leads to the landing page"


def test_the_landing_page_draws_its_example_picker_before_it_imports_the_model_libraries() -> None:
    """Issue 27: the picker comes from light modules (components.prologue) before ``components.page`` (PyTorch)."""
    tree = ast.parse((ROOT / "app.py").read_text(encoding="utf-8"))
    (landing,) = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "landing"]
    lines = [ast.unparse(node) for node in landing.body]
    heavy = next(i for i, line in enumerate(lines) if "components.page" in line)
    assert any(line == "draw_examples()" for line in lines[:heavy]), lines
    assert any("early=early" in line for line in lines[heavy:]), "open_page gets what was drawn"
