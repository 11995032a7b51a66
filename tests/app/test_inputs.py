"""components.inputs (issue 14): the example's "What to expect" box only while the inputs are the example's own,
placeholders phrased "e.g. …" and styled lighter (tiny random model: no model run needed)."""

from __future__ import annotations

from components import keys
from core.examples import load_examples
from tests.app.conftest import APP, ok, open_script

DUAL_PATH = "pages/1_Dual_Path.py"
TIMEOUT = 120


def _dual_path():
    at = open_script(APP, TIMEOUT)
    return ok(at.switch_page(DUAL_PATH).run())


def _expect_boxes(at) -> list[str]:
    return [i.value for i in at.info if "What to expect" in i.value]


def test_what_to_expect_only_while_the_inputs_are_the_examples(tiny_app) -> None:
    example = load_examples()[0]
    at = _dual_path()
    assert not _expect_boxes(at)
    ok(at.selectbox(key=keys.widget_key(keys.EXAMPLE)).select(example.id).run())
    assert len(_expect_boxes(at)) == 1, "the example's expectation is shown with its inputs"

    ok(at.text_area(key=keys.widget_key(keys.QUERY)).input(example.query + " Answer in one word.").run())
    assert not _expect_boxes(at), "an edited query must not sit under the example's prediction"
    assert any("no longer applies" in c.value for c in at.caption)
    assert at.selectbox(key=keys.widget_key(keys.EXAMPLE)).value is None, "own inputs: no example's name"

    ok(at.button(key=keys.EXAMPLE_RESTORE).click().run())
    assert at.text_area(key=keys.widget_key(keys.QUERY)).value == example.query
    assert len(_expect_boxes(at)) == 1, "restoring the example's inputs brings its expectation back"


def test_placeholders_read_as_examples_and_are_styled_lighter(tiny_app) -> None:
    at = _dual_path()
    for name in (keys.QUERY, keys.CONTEXT):
        assert at.text_area(key=keys.widget_key(name)).placeholder.startswith("e.g. ")
    styles = [h.proto.body for h in at.get("html")]
    assert any("::placeholder" in body and "italic" in body for body in styles), "the lighter placeholder style"


def test_after_typing_their_own_inputs_no_page_names_the_old_example(tiny_app) -> None:
    """Issue 45: after typing their own inputs, the other pages' example picker still showed the old example's
    name. Once the inputs are edited, every picker names none and says which example they were edited from."""
    example = load_examples()[0]
    at = _dual_path()
    ok(at.selectbox(key=keys.widget_key(keys.EXAMPLE)).select(example.id).run())
    ok(at.text_area(key=keys.widget_key(keys.CONTEXT)).input("My own passage about another city.").run())
    for page in ("pages/5_Ablations.py", "app.py"):
        other = ok(at.switch_page(page).run())
        assert other.selectbox(key=keys.widget_key(keys.EXAMPLE)).value is None, page
        assert any(f"edited from the example “{example.label[:17]}" in c.value for c in other.caption), page
        assert not _expect_boxes(other), page
    ok(at.switch_page(DUAL_PATH).run())
    ok(at.button(key=keys.EXAMPLE_RESTORE).click().run())
    assert at.selectbox(key=keys.widget_key(keys.EXAMPLE)).value == example.id, "restored: its name again"
    assert at.text_area(key=keys.widget_key(keys.CONTEXT)).value == example.context
