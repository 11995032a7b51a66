"""The model lock is fair and always released: queued runs in order, cancelled and failed runs give it back.

Issue 17 item 13 (a cancelled or failed run always releases the model lock) and issue 15 (queueing, cancellation
at every token and batch). Each test checks the lock from *another* thread afterwards: a lock leaked by the
run's thread would still be re-entrant for that thread and hide the leak.
"""

from __future__ import annotations

import threading
import time

import pytest
import torch

from core.engine import DualPathSettings, run_dual_path
from core.engine.batch import score_rows
from core.evaluation import EvaluationJob, JobSpec, JobStatus
from core.evaluation.data import LabeledRow
from core.model.handle import CancelToken, RunCancelled, check_cancelled, run_control

pytestmark = pytest.mark.usefixtures("one_thread")

WAIT_S = 10.0


def _free_from_another_thread(handle) -> bool:
    """Whether another thread can take the model within a second (i.e. nobody holds or leaked it)."""
    got: list[bool] = []

    def take() -> None:
        with handle.session():
            got.append(True)

    t = threading.Thread(target=take, daemon=True)
    t.start()
    t.join(timeout=WAIT_S)
    return got == [True]


def _wait_until(condition, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


def test_a_failed_forward_releases_the_lock(tiny_handle) -> None:
    def boom(*args):
        raise RuntimeError("a layer failed")

    layer = tiny_handle.model.model.layers[0]
    # transformers may install its own output-capturing hooks on first use: only ours must be gone after.
    hooks = [lambda: layer.register_forward_hook(boom)]
    with pytest.raises(RuntimeError, match="a layer failed"), tiny_handle.hooked(hooks):
        tiny_handle.forward(input_ids=torch.tensor([[1, 2, 3]]))
    assert boom not in layer._forward_hooks.values(), "the hook is removed"
    assert _free_from_another_thread(tiny_handle)


def test_a_run_cancelled_mid_generation_stops_within_a_token_and_releases_the_lock(tiny_handle) -> None:
    token = CancelToken()
    seen: list[int] = []

    def on_event(event) -> None:
        if event.path == "retrieval":
            seen.append(event.n_tokens)
            if event.n_tokens == 3:
                token.cancel("test")

    settings = DualPathSettings(max_new_tokens=40, force_length=True)
    with pytest.raises(RunCancelled, match="test"), run_control(cancel=token):
        run_dual_path(tiny_handle, "Where?", "Here.", settings, on_event=on_event)
    assert max(seen) <= 4, f"generation went on after the cancel: {seen}"
    assert _free_from_another_thread(tiny_handle)


def test_a_check_that_raises_its_own_exception_propagates_and_releases_the_lock(tiny_handle) -> None:
    class Stop(BaseException):  # like Streamlit's StopException: not an Exception
        pass

    calls = {"n": 0}

    def closed() -> bool:
        calls["n"] += 1
        if calls["n"] > 5:
            raise Stop()
        return False

    settings = DualPathSettings(max_new_tokens=40, force_length=True)
    with pytest.raises(Stop), run_control(cancel=CancelToken(closed)):
        run_dual_path(tiny_handle, "Where?", "Here.", settings)
    assert _free_from_another_thread(tiny_handle)


def test_queued_runs_get_the_model_in_order_and_see_how_many_are_ahead(tiny_handle) -> None:
    release = threading.Event()
    order: list[str] = []
    reports: dict[str, list[int]] = {}

    def holder() -> None:
        with tiny_handle.session():
            release.wait(WAIT_S)

    def queued(name: str) -> None:
        reports[name] = []
        with run_control(on_wait=reports[name].append), tiny_handle.session():
            order.append(name)

    threads = [threading.Thread(target=holder, daemon=True)]
    threads[0].start()
    _wait_until(tiny_handle.is_busy)
    for i, name in enumerate("BCD"):
        t = threading.Thread(target=queued, args=(name,), daemon=True)
        t.start()
        threads.append(t)
        _wait_until(lambda n=i + 1: tiny_handle.waiting() == n)
    assert tiny_handle.runs_ahead() == 4, "three queued and one running"
    release.set()
    for t in threads:
        t.join(WAIT_S)
    assert order == ["B", "C", "D"], "first come, first served"
    assert reports["D"][0] == 3, f"D saw the running run and B, C ahead: {reports['D']}"
    assert all(r[-1] == 0 for r in reports.values()), "each is told when its run starts"
    assert all(r[:-1] == sorted(r[:-1], reverse=True) for r in reports.values()), "the count only goes down"
    assert tiny_handle.waiting() == 0 and _free_from_another_thread(tiny_handle)


def test_a_run_cancelled_while_queued_leaves_the_queue(tiny_handle) -> None:
    release = threading.Event()
    token = CancelToken()
    outcome: list[str] = []

    def holder() -> None:
        with tiny_handle.session():
            release.wait(WAIT_S)

    def queued() -> None:
        try:
            with run_control(cancel=token), tiny_handle.session():
                outcome.append("ran")
        except RunCancelled:
            outcome.append("cancelled")

    h = threading.Thread(target=holder, daemon=True)
    h.start()
    _wait_until(tiny_handle.is_busy)
    q = threading.Thread(target=queued, daemon=True)
    q.start()
    _wait_until(lambda: tiny_handle.waiting() == 1)
    token.cancel("closed tab")
    q.join(WAIT_S)
    assert outcome == ["cancelled"]
    assert tiny_handle.waiting() == 0, "the cancelled run left the queue while the model was still busy"
    release.set()
    h.join(WAIT_S)
    assert _free_from_another_thread(tiny_handle)


def test_score_rows_stops_between_batches_when_cancelled(tiny_handle) -> None:
    token = CancelToken()
    batches: list[int] = []

    def progress(done: int, total: int) -> None:
        batches.append(done)
        token.cancel("after the first batch")

    rows = [(f"Question {i}?", f"Context {i}.") for i in range(6)]
    with pytest.raises(RunCancelled), run_control(cancel=token):
        score_rows(tiny_handle, rows, DualPathSettings(max_new_tokens=3), batch_size=2, progress=progress)
    assert batches == [2], "one batch scored, then stopped"
    assert _free_from_another_thread(tiny_handle)


def test_a_cancelled_evaluation_job_stops_keeps_its_rows_and_can_resume(tiny_handle) -> None:
    labels = ["memorized", "grounded"] * 3
    rows = [LabeledRow(i + 1, f"Question {i}?", f"Context {i}.", label) for i, label in enumerate(labels)]
    settings = DualPathSettings(max_new_tokens=3)
    spec = JobSpec("t.csv", "d", tuple(range(6)), tiny_handle.info.name, settings, (), batch_size=2)
    job = EvaluationJob(spec, rows)
    job.prepare(tiny_handle)
    token = CancelToken()
    with run_control(cancel=token):
        job.run(tiny_handle, threshold=None, threshold_source=None, on_batch=lambda j: token.cancel("tab closed"))
    assert job.status == JobStatus.STOPPED and job.n_done == 2, (job.status, job.n_done)
    assert not job.in_flight and job.resumable
    job.resume()
    job.run(tiny_handle, threshold=None, threshold_source=None)
    assert job.status == JobStatus.DONE and job.n_done == 6
    assert _free_from_another_thread(tiny_handle)


def test_check_cancelled_is_a_no_op_outside_a_run_control() -> None:
    check_cancelled()
    token = CancelToken()
    token.cancel()
    with run_control(cancel=token), pytest.raises(RunCancelled):
        check_cancelled()
    check_cancelled()  # the block has ended
