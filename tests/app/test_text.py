"""components.text.count: a number and its noun in agreement ("1 batch", not "1 batches")."""

from __future__ import annotations

from components.evaluate_tabs import run_estimate
from components.text import count


def test_count_agrees_in_number() -> None:
    assert count(1, "batch") == "1 batch" and count(2, "batch") == "2 batches" and count(0, "row") == "0 rows"
    assert count(3, "query", "queries") == "3 queries"


def test_the_evaluate_estimate_says_one_batch() -> None:
    text = run_estimate("never-measured", n_rows=8, batch_size=8, max_new_tokens=16, names=[])
    assert text.startswith("8 rows in 1 batch of up to 8"), text
