"""components.stored_runs.start_hint: the first-run hint asks only for what is missing."""

from __future__ import annotations

from components.stored_runs import start_hint


def test_the_hint_asks_for_what_is_missing_and_only_that() -> None:
    assert (
        start_hint("Run SMA", "", "", needs_context=True)
        == "Type or pick a query and a context, then press **Run SMA**."
    )
    assert start_hint("Run SMA", "Q?", "", needs_context=True) == "Type or pick a context, then press **Run SMA**."
    assert start_hint("Run Self-Critique", "", "C.", needs_context=False).startswith("Type or pick a query,")


def test_with_both_boxes_filled_it_says_press_the_button() -> None:
    hint = start_hint("Run SMA", "Q?", "C.", needs_context=True, extra="Or try the faster context ablation below.")
    assert hint == "Press **Run SMA** to analyze this query and context. Or try the faster context ablation below."
    assert "Type or pick" not in start_hint("Run Self-Critique", "Q?", "C.", needs_context=False)
