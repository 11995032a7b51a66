"""pages/1_Dual_Path.py on the embedded model: where context and memory agree on the answer span, the swap test runs
as part of the run (no click) and a decided test carries the verdict, the internals' own verdict said beside it; the
setting turns it off (the internals' verdict alone)."""

from __future__ import annotations

import pytest

from components import keys
from tests.app.conftest import APP, ok, open_script

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]


@pytest.fixture(autouse=True)
def swap_on(monkeypatch):
    """The suite runs with the run's swap test off (tests/conftest.py); these tests are of it: the default, on."""
    monkeypatch.setenv("READ_OR_RECALL_SWAP", "auto")


PAGE = "pages/1_Dual_Path.py"
TIMEOUT = 600
QUERY = "What is the capital of France?"
CONTEXT = "Paris is the capital and largest city of France."
OUTCOMES = ("**Follows the swap", "**Keeps the original", "**No swap test:**", "**Undecided.**")


def _boxes(at) -> list[str]:
    return [str(b.value) for b in (*at.success, *at.warning, *at.info)]


def test_an_agreeing_context_is_swap_tested_with_the_run_and_the_setting_turns_it_off() -> None:
    at = ok(open_script(APP, TIMEOUT).switch_page(PAGE).run())
    at.text_area(key=keys.widget_key(keys.QUERY)).input(QUERY)
    at.text_area(key=keys.widget_key(keys.CONTEXT)).input(CONTEXT)
    ok(at.button(key=keys.RUN).click().run())
    assert any(b.startswith(OUTCOMES) for b in _boxes(at)), _boxes(at)  # run without pressing its button
    assert not [b for b in at.button if b.key == keys.SWAP_RUN]
    carried = [c.value for c in at.caption if c.value.startswith("The swap test below decided this verdict")]
    decided = any(b.startswith(("**Follows the swap", "**Keeps the original")) for b in _boxes(at))
    assert bool(carried) == decided, (carried, _boxes(at))
    if decided:  # never side by side unexplained: the swap box says it decided the verdict above
        assert any("It decided the verdict above" in b for b in _boxes(at)), _boxes(at)
    ok(at.toggle(key=keys.SWAP_AUTO).set_value(False).run())
    assert not [c for c in at.caption if c.value.startswith("The swap test below decided this verdict")]
