"""``run`` swap-tests where context and memory agree and a decided test carries the verdict; the notebook's
``lab.run`` does the same (one door: :mod:`core.engine.swap_verdict`), and both give the internals' own prediction
beside it. On the embedded model, with a context the model also knows (the capital of France)."""

from __future__ import annotations

import json

import pytest

import core.cli.common
from core.cli import main
from core.engine.swap_verdict import agreeing

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]


@pytest.fixture(autouse=True)
def swap_on(monkeypatch):
    """The suite runs with the run's swap test off (tests/conftest.py); these tests are of it: the default, on."""
    monkeypatch.setenv("READ_OR_RECALL_SWAP", "auto")


QUERY = "What is the capital of France?"
CONTEXT = "Paris is the capital and largest city of France."


def _run(monkeypatch, capsys, embedded_handle, *flags: str) -> dict:
    monkeypatch.setattr(core.cli.common, "load_model", lambda *a, **k: embedded_handle)
    assert main(["run", "--query", QUERY, "--context", CONTEXT, "--json", *flags]) == 0
    return json.loads(capsys.readouterr().out)


def test_run_swap_tests_an_agreeing_context_and_the_test_carries_the_verdict(monkeypatch, capsys, embedded_handle):
    data = _run(monkeypatch, capsys, embedded_handle)
    axes = data["axes"]
    test = axes["swap_test"]
    assert test["outcome"] in ("read", "recalled", "neither", "not applicable")
    if test["outcome"] in ("read", "recalled"):
        assert data["verdict"] == test["outcome"] and axes["internals"]["verdict"] == data["internals_verdict"]
        assert "swap test" in axes["reason"]
    else:
        assert axes["internals"] is None and data["internals_verdict"] == data["verdict"]
    skipped = _run(monkeypatch, capsys, embedded_handle, "--no-swap-test")
    assert "swap_test" not in skipped["axes"] and skipped["axes"]["internals"] is None
    assert skipped["verdict"] == skipped["internals_verdict"] == data["internals_verdict"]


def test_lab_run_swap_tests_where_context_and_memory_agree(embedded_handle):
    from read_or_recall import Lab

    lab = Lab(handle=embedded_handle)
    run = lab.run(QUERY, CONTEXT)
    assert agreeing(run.result.head)
    assert run.swap_tests and run.swap_test() is run.swap_tests[0]  # held: computed as part of the run
    assert "swap_test" in run.axes
    never = lab.run(QUERY, CONTEXT, swap="never")
    assert not never.swap_tests and "swap_test" not in never.axes
    with pytest.raises(ValueError, match="auto, always, never"):
        lab.run(QUERY, CONTEXT, swap="maybe")
