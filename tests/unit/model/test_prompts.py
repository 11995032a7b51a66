"""The one input check of every query and context (:func:`core.model.prompts.clean_inputs`, reached by the app,
the CLI and the audit service): text of whitespace and zero-width characters only counts as empty (issue 25
item 12)."""

from __future__ import annotations

import pytest

from core.cli import main
from core.engine.prepare import prepare_prompts
from core.engine.settings import DualPathSettings
from core.model.prompts import clean_inputs, has_visible_text

INVISIBLE = [
    "\u200b",
    "\u200b\u200c\u200d",
    "\u2060\ufeff",
    " \u200b\n\t\u200e\u200f ",
    "\uffff\ufffe",
    "\ufdd0 \U0010ffff",
]


@pytest.mark.parametrize("text", INVISIBLE)
def test_zero_width_only_text_is_not_visible(text):
    assert not has_visible_text(text)
    assert has_visible_text(text + "a") and has_visible_text("\u200bé") and has_visible_text("👩‍👩‍👧")


@pytest.mark.parametrize("text", INVISIBLE)
def test_a_zero_width_only_query_is_empty_and_context_is_refused(text, tiny_handle):
    with pytest.raises(ValueError, match="The query is empty"):
        clean_inputs(text, "A context.")
    assert clean_inputs("Where?", text)[1] == ""
    with pytest.raises(ValueError, match="The context is empty"):
        prepare_prompts(tiny_handle, "Where is it?", text, DualPathSettings(max_new_tokens=2, score_window=2))
    kept = prepare_prompts(tiny_handle, "Where\u200b is it?", "It is \u200dhere.", DualPathSettings(max_new_tokens=2))
    assert "\u200b" in kept.query  # visible text keeps its zero-width characters


@pytest.mark.parametrize(
    ("query", "context", "message"), [("\u200b\u200b", "Ctx.", "query is empty"), ("Q?", "\u200b", "context is empty")]
)
def test_the_cli_refuses_zero_width_only_inputs_with_one_line(query, context, message, cli_model, capsys):
    assert main(["run", "--query", query, "--context", context]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
