"""core.methods.selfcritique (issue 14): no blank first line in the critique instruction; the prompt stays the
authors'."""

from __future__ import annotations

from core.methods.selfcritique import DEFAULT_INSTRUCTION, critique_query


def test_the_critique_instruction_has_no_blank_first_line_and_the_prompt_is_unchanged() -> None:
    assert not DEFAULT_INSTRUCTION.startswith("\n")
    authors = "\n" + DEFAULT_INSTRUCTION  # the released code's SELF_CRITIQUE_INSTRUCTION begins with a newline
    assert critique_query("Q?", "r1") == "Q?" + authors.replace("{response}", "r1")
    assert critique_query("Q?", "r1", authors) == critique_query("Q?", "r1"), "an old stored instruction still works"
