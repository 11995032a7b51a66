"""``evaluate`` reports the app's headline: on every bundled example, each row's ``verdict`` (and its answer span)
equals what ``run --json --no-swap-test`` gives for the same inputs — the internals' own verdict, which ``run`` and the
page keep as ``internals_verdict`` where a swap test carries theirs — and RePCS' own verdict sits beside it."""

from __future__ import annotations

import json

import pytest

from core.engine import DualPathSettings, run_dual_path
from core.engine.axes import with_headline


@pytest.mark.slow
@pytest.mark.usefixtures("one_thread")
def test_evaluate_headline_equals_run_json_on_every_bundled_example(embedded_handle, bundled_examples_report):
    examples, rows, report = bundled_examples_report  # evaluate's batched run (tests/conftest.py)
    settings = DualPathSettings()
    by_row = {r["row"]: r for r in report["rows"]}
    for row, example in zip(rows, examples):
        page = json.loads(with_headline(run_dual_path(embedded_handle, row.query, row.context, settings)).to_json())
        got = by_row[row.row]
        assert got["verdict"] == page["verdict"], (example["id"], got["axes"]["reason"], page["axes"]["reason"])
        assert got["internals_verdict"] == page["internals_verdict"] == got["verdict"], example["id"]
        assert got["axes"]["span"]["span"]["text"] == page["axes"]["span"]["span"]["text"], example["id"]
        assert got["repcs_verdict"] == page["repcs_verdict"], example["id"]
        assert got["axes"]["context_reliance"]["state"] == page["axes"]["context_reliance"]["state"], example["id"]
