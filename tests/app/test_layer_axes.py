"""figures.layer_axes.token_ticks: token labels thinned and cut so that they do not overlap."""

from __future__ import annotations

from figures.layer_axes import MAX_AXIS_LABELS, MAX_TICK_CHARS, token_ticks


def test_a_long_sequence_gets_at_most_a_readable_number_of_short_labels() -> None:
    labels = [f"token{i}" for i in range(200)] + ["a" * 40, "x &amp; y" * 3]
    ticks = token_ticks(labels)
    assert len(ticks["tickvals"]) <= MAX_AXIS_LABELS <= 40, "about 14 px per label at 1,024 px"
    assert all(len(t) <= MAX_TICK_CHARS for t in ticks["ticktext"]) and ticks["automargin"]
    short = token_ticks(["Paris", "a" * 40, "x &amp; y &amp; z"])
    assert short["ticktext"][0] == "Paris" and short["ticktext"][1].endswith("…")
    assert "&am…" not in short["ticktext"][2], "an escaped entity is never cut in half"
