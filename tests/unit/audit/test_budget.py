"""The work meter behind the audit service's time budget and fair slices (core/audit/budget.py)."""

from __future__ import annotations

import pytest

from core.audit.budget import MAX_FORWARD_TOKENS, WorkMeter, forward_units


def test_forward_units_grow_with_rows_and_quadratically_with_length():
    assert forward_units(1, 100, attention_tokens=100.0) == pytest.approx(200.0)
    assert forward_units(4, 100, attention_tokens=100.0) == pytest.approx(4 * forward_units(1, 100, 100.0))
    assert forward_units(1, 1000, attention_tokens=100.0) > 10 * forward_units(1, 100, attention_tokens=100.0)


def test_a_plan_counts_every_prompt_token_and_estimates_with_the_measured_rate():
    meter = WorkMeter(seconds_per_unit=1e-3, attention_tokens=1e9)  # attention negligible: units = tokens
    plan = meter.plan([100, 50, 70], [20, 10, 15], batch_size=1)
    assert plan.tokens == 265
    assert plan.units == pytest.approx(265.0, rel=1e-6) and plan.seconds == pytest.approx(0.265, rel=1e-6)
    with_answers = meter.plan([100], [20], batch_size=1, new_tokens=8)
    assert with_answers.tokens == 120 + 16 and with_answers.units > meter.plan([100], [20], batch_size=1).units


def test_padding_counts_when_rows_share_a_forward():
    meter = WorkMeter(seconds_per_unit=1e-9, attention_tokens=1e9)  # fast: every row fits one slice
    together = meter.plan([100, 10], [10, 10], batch_size=16)
    assert together.units == pytest.approx(2 * 100 + 2 * 10)  # the short row is padded to the long one


def test_forward_passes_are_sized_to_one_fair_slice():
    slow = WorkMeter(seconds_per_unit=1e-3, slice_s=0.25, attention_tokens=1e9)
    assert 245 <= slow.forward_tokens(100) <= 250  # 0.25 s at 1 ms per token: two rows of 100 padded tokens
    assert slow.forward_tokens(4000) == 4000  # a prompt longer than a slice still runs (one row)
    fast = WorkMeter(seconds_per_unit=1e-9)
    assert fast.forward_tokens(100) == MAX_FORWARD_TOKENS  # the memory bound, however fast


def test_observed_forwards_move_the_rate_toward_what_was_measured():
    meter = WorkMeter(seconds_per_unit=1e-3, smoothing=0.5, attention_tokens=1e9)
    meter.observe(1, 100, 1.0)  # 10 ms per unit measured
    assert meter.seconds_per_unit == pytest.approx(0.5 * (1e-3 + 1e-2))
    meter.observe(1, 100, 0.0)  # not a measurement
    meter.observe(0, 100, 1.0)
    assert meter.seconds_per_unit == pytest.approx(0.5 * (1e-3 + 1e-2))


def test_the_probe_measures_the_model(tiny_handle):
    meter = WorkMeter()
    rate = meter.probe(tiny_handle)
    assert rate > 0 and meter.seconds_per_unit == rate
    assert meter.attention_tokens == 2 * tiny_handle.info.hidden_size


def test_bad_settings_are_refused():
    for kwargs in ({"slice_s": 0}, {"smoothing": 0}, {"smoothing": 1.5}, {"attention_tokens": 0}):
        with pytest.raises(ValueError):
            WorkMeter(**kwargs)


def test_the_audit_with_the_least_work_left_gets_the_next_turn():
    import threading
    import time

    from core.audit.budget import ModelTurns

    turns, order, started = ModelTurns(), [], []
    release = threading.Event()

    def hold() -> None:
        with turns.turn(1.0):
            started.append("holder")
            release.wait(10)

    def ask(name: str, left: float) -> None:
        with turns.turn(left):
            order.append(name)

    holder = threading.Thread(target=hold)
    holder.start()
    while not started:
        time.sleep(0.01)
    waiting = [threading.Thread(target=ask, args=("batch", 50.0)), threading.Thread(target=ask, args=("single", 0.5))]
    for t in waiting:  # the batch asks first
        t.start()
        time.sleep(0.05)
    while turns.waiting() < 2:
        time.sleep(0.01)
    release.set()
    for t in [holder, *waiting]:
        t.join(10)
    assert order == ["single", "batch"]


def test_a_long_wait_counts_against_the_work_left_so_nothing_starves():
    import time

    from core.audit.budget import ModelTurns

    turns = ModelTurns()
    now = time.monotonic()
    turns._waiting = {"old": (5.0, now - 10.0, 0, None), "new": (0.5, now, 1, None)}  # waited 10 s, 5 s left
    assert turns._next() == "old"


def test_a_cancelled_audit_gives_up_its_place_in_the_queue():
    import threading

    from core.audit.budget import ModelTurns
    from core.model.handle import CancelToken, RunCancelled, run_control

    turns, box = ModelTurns(), {}
    token = CancelToken()

    def ask() -> None:
        with run_control(cancel=token):
            try:
                with turns.turn(1.0):
                    box["ran"] = True
            except RunCancelled:
                box["cancelled"] = True

    with turns.turn(1.0):
        t = threading.Thread(target=ask)
        t.start()
        while turns.waiting() < 1:
            threading.Event().wait(0.01)
        token.cancel("test")
        t.join(5)
    assert box == {"cancelled": True} and turns.waiting() == 0
    with turns.turn(1.0):  # the model is free again
        pass


# -- issue 43 C: an accepted request is never pushed past its deadline by the sharing ------------------------------


def _plan(seconds: float):
    from core.audit.budget import WorkPlan

    return WorkPlan(tokens=1, units=seconds * 1000.0, seconds=seconds, forward_tokens=1)  # at 1 ms per unit


def test_admission_sets_the_model_time_aside_and_refuses_what_would_not_fit():
    import time

    from core.audit.budget import ModelBusy, ModelTurns

    turns, meter, now = ModelTurns(), WorkMeter(seconds_per_unit=1e-3), time.monotonic()
    batch = turns.admit(meter, _plan(36.0), now, 60.0)  # 36 s by 54 s (90 % of 60): two thirds of the model
    assert turns.promised() == pytest.approx(36.0 / 54.0, rel=0.01)
    single = turns.admit(meter, _plan(0.2), now, 60.0)  # a single audit still fits beside it
    with pytest.raises(ModelBusy) as refused:  # another 36 s batch does not: the first would miss its deadline
        turns.admit(meter, _plan(36.0), now, 60.0)
    assert refused.value.promised > 0.6 and refused.value.retry_after_s == pytest.approx(36.2, rel=0.01)
    turns.release(batch)
    turns.release(single)
    assert turns.promised() == 0.0
    alone = turns.admit(meter, _plan(58.0), now, 60.0)  # over 90 % of the budget, but alone: accepted
    assert alone.density(now) > 1.0
    turns.release(alone)


def test_a_batch_behind_its_schedule_goes_before_a_single_with_less_work_left():
    import time

    from core.audit.budget import ModelTurns

    turns, meter = ModelTurns(), WorkMeter(seconds_per_unit=1e-3)
    now = time.monotonic()
    on_time = turns.admit(meter, _plan(10.0), now, 60.0)
    late = turns.admit(meter, _plan(10.0), now - 30.0, 60.0)  # arrived 30 s ago, nothing done: 5.6 s behind
    turns._waiting = {"single": (0.2, now, 0, None), "batch": (10.0, now, 1, late)}
    assert late.lag_s(now) == pytest.approx(10.0 * 30.0 / 54.0, rel=0.01)
    assert turns._next() == "batch"
    turns._waiting = {"single": (0.2, now, 0, None), "batch": (10.0, now, 1, on_time)}
    assert on_time.lag_s(now) < 0.25 and turns._next() == "single"  # on schedule: least work left first
    late.units_left = 10.0 * 1000.0 * (1 - 30.0 / 54.0)  # caught up with its schedule
    turns._waiting = {"single": (0.2, now, 0, None), "batch": (10.0, now, 1, late)}
    assert turns._next() == "single"
