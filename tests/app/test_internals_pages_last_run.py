"""Every analysis page says which run it analyzes, and all of them analyze the last run (issue 14).

Tiny random model: a Dual Path run, then the query box is changed without running; Attention, Layer
trajectories, Vocabulary lens and RADAR must each show the run's query in a collapsed box at the top, and
RADAR must read the run's query, not the box's.
"""

from __future__ import annotations

import pytest

from components import keys
from components.text import escape_markdown
from tests.app.conftest import APP, ROOT, ok, open_script

TIMEOUT = 180
Q, C = "Where is the tower?", "The tower stands in Quillmere."
OTHER = "Who built the bridge?"
PAGES = ["pages/2_Attention.py", "pages/3_Layer_Trajectories.py", "pages/4_Vocabulary_Lens.py", "pages/8_RADAR.py"]


@pytest.fixture
def after_run(tiny_app):
    at = open_script(APP, TIMEOUT)
    ok(at.switch_page("pages/1_Dual_Path.py").run())
    at.number_input(key=keys.widget_key(keys.MAX_NEW_TOKENS)).set_value(4).run()
    at.text_area(key=keys.widget_key(keys.QUERY)).input(Q)
    at.text_area(key=keys.widget_key(keys.CONTEXT)).input(C)
    ok(at.button(key=keys.RUN).click().run())
    ok(at.text_area(key=keys.widget_key(keys.QUERY)).input(OTHER).run())  # typed, not run
    return at


@pytest.mark.parametrize("page", PAGES)
def test_analysis_pages_show_and_use_the_last_run(after_run, page) -> None:
    at = ok(after_run.switch_page(page).run())
    boxes = [e for e in at.expander if e.label.startswith("This page analyzes the last run")]
    assert len(boxes) == 1 and escape_markdown(Q) in boxes[0].label, [e.label for e in at.expander]
    assert not boxes[0].proto.expanded, "collapsed"
    assert [c.value for c in boxes[0].code][:2] == [Q, C], "the query and context it is about"
    if page.endswith("RADAR.py"):
        analyzed = [c.value for c in at.code if c.value.strip() and c.value not in (Q, C)]
        assert any(Q in v for v in at.code.values) and not any(OTHER in v for v in analyzed), "the run, not the box"


def test_layer_trajectories_say_what_a_flag_means() -> None:
    source = (ROOT / "pages" / "3_Layer_Trajectories.py").read_text(encoding="utf-8")
    namespace: dict = {}
    exec(compile(source.replace("\nmain()\n", "\n"), "traj", "exec"), namespace)  # the page's helper, not its run
    flag_meaning = namespace["flag_meaning"]
    text = flag_meaning([0.0, 5.0, 0.0], [0.0, 1.0, 0.0], [1], 3)
    assert text.startswith("For this example, 1 of 3 layers moved further than") and "does not say" in text
    assert "less far than" in flag_meaning([0.0, -5.0], [0.0, 1.0], [1], 2)
    assert flag_meaning([0.0], [0.0], [], 1).startswith("No layer of 1")
