"""core.engine.estimate: estimates from the costs measured in this process, scaled by the share of their token
budget recent runs used, with a likely range and the number of runs behind it (a fake clock, fake runs)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from core.engine.estimate import (
    DUAL_PATH,
    FILL,
    FORWARD,
    GENERATED_TOKEN,
    RUN_BASIS,
    UNIT_BASIS,
    CostMeter,
    Estimate,
    describe_estimate,
    estimate,
    estimate_run,
    estimate_seconds,
    measured_run,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _meter(clock: FakeClock | None = None) -> CostMeter:
    return CostMeter(smoothing=0.5, clock=clock or FakeClock())


def test_a_budget_is_scaled_by_the_share_recent_runs_used() -> None:
    meter = _meter()
    meter.observe("h", GENERATED_TOKEN, 2.0, 10)  # 0.2 s per step
    assert estimate_seconds("h", generated_tokens=192, meter=meter) == pytest.approx(192 * 0.2), "no share yet"
    for used in (12, 16, 8):  # answers of 12, 16 and 8 tokens out of a budget of 64 each
        meter.observe_fill("h", used, 64)
    assert meter.fill("h") == pytest.approx(12 / 64)  # the median share
    # Self-Critique's 3 × 64 budget: 192 × 12/64 × 0.2 s = 7.2 s, not the 38.4 s of the whole budget
    assert estimate_seconds("h", generated_tokens=192, meter=meter) == pytest.approx(192 * 12 / 64 * 0.2)
    assert estimate_seconds("h", forwards=3, meter=meter) == pytest.approx(0.6), "forwards are not scaled"
    meter.observe_fill("h", 500, 64)
    assert max(v for _, v in meter.recent("h", FILL)) == 1.0, "a share is capped at the whole budget"


def test_the_likely_range_and_how_many_runs_it_rests_on() -> None:
    meter = _meter()
    for seconds in (1.0, 3.0, 2.0):  # 0.1, 0.3 and 0.2 s per step
        meter.observe("h", GENERATED_TOKEN, seconds, 10)
    meter.observe_fill("h", 16, 64)
    meter.observe_fill("h", 32, 64)
    est = estimate("h", generated_tokens=100, meter=meter)
    assert isinstance(est, Estimate) and est.runs == 3 and est.measured_fill
    # the median cost of 0.1, 0.3 and 0.2 s per step: 0.2; the median share: 0.375
    assert est.seconds == pytest.approx(100 * 0.375 * 0.2)
    # the range: the median cost × the smallest and the largest share (answers of 16 and 32 of 64 tokens); the
    # slowest cost (a warming-up first run) no longer multiplies the largest share ("1 s – 2 min")
    assert est.low == pytest.approx(100 * 0.25 * 0.2) and est.high == pytest.approx(100 * 0.5 * 0.2)
    assert est.confidence == "fair", "a range of ×2"
    assert est.describe() == (
        "≈ 8 s on this machine (likely 5–10 s, depending on the answers' length; from the cost per token of 3 runs)"
    )
    assert describe_estimate(est) == est.describe()


def test_one_run_is_rough_and_unknown_is_said_plainly() -> None:
    meter = _meter()
    assert estimate("h", generated_tokens=10, meter=meter) is None
    assert describe_estimate(None).startswith("time not measured yet")
    meter.observe("h", GENERATED_TOKEN, 30.0, 60)
    meter.observe("h", FORWARD, 1.0, 1)
    one = estimate("h", generated_tokens=64, forwards=1, meter=meter)
    assert one.runs == 1 and one.confidence == "rough" and not one.measured_fill
    assert one.describe() == (
        "≈ 35 s on this machine (at most: if every answer uses its whole token budget; from the cost per token of "
        "one run)"
    )


def test_steady_runs_give_a_good_estimate() -> None:
    meter = _meter()
    for _ in range(4):
        meter.observe("h", GENERATED_TOKEN, 2.0, 20)
        meter.observe_fill("h", 20, 64)
    est = estimate("h", generated_tokens=64, meter=meter)
    assert est.confidence == "good" and est.low == est.high == pytest.approx(est.seconds)


def test_a_warming_up_first_run_does_not_weigh_on_the_estimate() -> None:
    meter = _meter()
    for seconds in (0.68, 0.20, 0.16):  # s per step of three dual-path runs on the embedded model, the first cold
        meter.observe("h", GENERATED_TOKEN, seconds, 1)
    assert meter.per_unit("h", GENERATED_TOKEN) == pytest.approx(0.20), "the median, not a mean pulled up by 0.68"


def test_only_the_last_window_of_measurements_counts_and_each_has_its_time() -> None:
    clock = FakeClock()
    meter = CostMeter(clock=clock, window=3)
    for i in range(5):
        clock.now = 1000.0 + 60 * i
        meter.observe("h", GENERATED_TOKEN, float(i + 1), 1)
    recent = meter.recent("h", GENERATED_TOKEN)
    assert [t for t, _ in recent] == [1120.0, 1180.0, 1240.0] and [v for _, v in recent] == [3.0, 4.0, 5.0]
    assert meter.measurements("h", GENERATED_TOKEN) == 5


def test_timed_measures_with_the_meters_clock() -> None:
    clock = FakeClock()
    meter = CostMeter(clock=clock)
    with meter.timed("h", GENERATED_TOKEN, 20):
        clock.now += 4.0  # the run takes 4 s on the fake clock
    assert meter.per_unit("h", GENERATED_TOKEN) == pytest.approx(0.2)

    def failing_run() -> None:
        with meter.timed("h", GENERATED_TOKEN, 20):
            clock.now += 100.0
            raise RuntimeError("a failed run is not a measurement")

    with pytest.raises(RuntimeError):
        failing_run()
    assert meter.measurements("h", GENERATED_TOKEN) == 1


def test_a_dual_path_result_reports_its_cost_and_its_share(monkeypatch) -> None:
    from core.engine import estimate as module

    meter = _meter()
    monkeypatch.setattr(module, "METER", meter)
    result = SimpleNamespace(
        timings={"generate_s": 5.0, "score_s": 0.5},
        n_tokens=9,
        parametric=SimpleNamespace(token_ids=list(range(4))),
        settings={"max_new_tokens": 64},
    )
    module.observe_result("h", result)
    assert meter.per_unit("h", GENERATED_TOKEN) == pytest.approx(5.0 / 10)  # 9 steps + the prompt's own pass
    assert meter.fill("h") == pytest.approx(9 / 64) and meter.per_unit("h", FORWARD) == pytest.approx(0.5)
    assert module.dual_path_estimate("h", 64).seconds == pytest.approx(64 * 9 / 64 * 0.5 + 0.5)


def test_after_one_run_of_a_kind_its_estimate_is_that_run_scaled_to_the_work() -> None:
    meter = _meter()
    meter.observe("h", GENERATED_TOKEN, 2.0, 10)  # 0.2 s per token: the unit model says 64 × 0.2 = 12.8 s
    units = estimate("h", generated_tokens=64, meter=meter)
    assert estimate_run("h", "detector:sma", 64, units, meter=meter) is units, "no run of the kind yet"
    fallback = estimate_run("h", "detector:sma", 64, 20.0, meter=meter)
    assert fallback.seconds == 20.0 and fallback.runs == 0 and fallback.basis == UNIT_BASIS
    assert fallback.describe() == "≈ 20 s on this machine (no run like it measured yet: from the cost per token)"
    meter.observe_run("h", "detector:sma", 45.0, 64)  # the run took 45 s, not the 12.8 s of the unit model
    one = estimate_run("h", "detector:sma", 64, units, meter=meter)
    assert one.basis == RUN_BASIS and one.seconds == pytest.approx(45.0) and one.runs == 1 and one.last_s == 45.0
    assert one.describe() == "≈ 45 s on this machine (the last run like it took 45.0 s)"
    assert estimate_run("h", "detector:sma", 32, units, meter=meter).seconds == pytest.approx(22.5), "scaled"
    assert estimate_run("h", "detector:selfcritique", 64, units, meter=meter) is units, "kinds are separate"
    assert estimate_run("other", "detector:sma", 64, None, meter=meter) is None, "handles are separate"


def test_runs_of_a_kind_give_their_median_and_their_spread() -> None:
    meter = _meter()
    for seconds in (10.0, 14.0, 12.0):
        meter.observe_run("h", DUAL_PATH, seconds, 64)
    est = estimate_run("h", DUAL_PATH, 64, meter=meter)
    assert (est.seconds, est.low, est.high) == pytest.approx((12.0, 10.0, 14.0)) and est.runs == 3
    assert est.describe() == "≈ 10 s on this machine (likely 10–15 s: the last 3 runs like it)"
    meter.observe_run("h", DUAL_PATH, float("nan"), 64)  # not a measurement
    meter.observe_run("h", DUAL_PATH, 5.0, 0)
    assert len(meter.runs("h", DUAL_PATH)) == 3
    with pytest.raises(ValueError, match="work must be positive"):
        estimate_run("h", DUAL_PATH, 0, meter=meter)
    meter.observe_run("h", "detector:crm_l1", 0.4, 12)  # no generation: an embedding of two answers
    assert estimate_run("h", "detector:crm_l1", 64, meter=meter).seconds == pytest.approx(0.4), "a fixed cost"
    with pytest.raises(ValueError, match="needs a kind"):
        meter.observe_run("h", "", 1.0, 1)


def test_measured_run_records_only_a_run_that_ends() -> None:
    clock = FakeClock()
    meter = CostMeter(clock=clock)
    with measured_run("h", "page:sma", 100, meter=meter):
        clock.now += 30.0
    assert meter.runs("h", "page:sma") == [(1030.0, 30.0, 100.0)]

    def failing() -> None:
        with measured_run("h", "page:sma", 100, meter=meter):
            clock.now += 5.0
            raise RuntimeError("a failed run is not a measurement")

    with pytest.raises(RuntimeError):
        failing()
    assert len(meter.runs("h", "page:sma")) == 1
    meter.clear()
    assert meter.runs("h", "page:sma") == []


def test_answer_steps_is_the_longer_answer_of_a_run() -> None:
    from core.engine.estimate import answer_steps

    run = SimpleNamespace(n_tokens=12, parametric=SimpleNamespace(token_ids=list(range(64))))
    assert answer_steps(run) == 64, "both paths decode in one batch: the longer answer sets the steps"
    assert answer_steps(SimpleNamespace(n_tokens=9, parametric=SimpleNamespace(token_ids=[]))) == 9
    assert answer_steps(SimpleNamespace(n_tokens=0, parametric=None)) == 1, "never zero work"


# --- issue 45: a cost per unit of work, scaled by the parameter count, and a first run from the machine's pace ---


def test_a_models_first_run_is_estimated_from_its_size_and_the_machines_pace() -> None:
    from core.engine.estimate import PACE, SCALED

    meter = CostMeter(clock=FakeClock(), pace=lambda: 1e-9)  # 1 ns per decoding step per parameter
    meter.set_params("gemma", 270e6)
    first = estimate("gemma", generated_tokens=100, meter=meter)
    assert first is not None, "never 'not measured yet' when the model's size is known"
    assert first.seconds == pytest.approx(100 * 270e6 * 1e-9) and first.source == PACE
    assert "no run of this model yet" in first.describe() and "270 M parameters" in first.describe()
    # another model measured 0.2 s per step at 135 M parameters: Gemma's first run borrows it, scaled by size
    meter.set_params("smol", 135e6)
    meter.observe("smol", GENERATED_TOKEN, 2.0, 10)
    scaled = estimate("gemma", generated_tokens=100, meter=meter)
    assert scaled.seconds == pytest.approx(100 * 0.2 * 2) and scaled.source == SCALED
    assert estimate("nameless", generated_tokens=10, meter=meter) is None, "no size, no measurement: unknown"


def test_a_kind_is_the_ratio_of_its_wall_time_to_its_units_of_work() -> None:
    from core.engine.estimate import PROMPT_TOKEN, Work

    meter = _meter()
    meter.observe("h", GENERATED_TOKEN, 1.0, 10)  # 0.1 s per step
    meter.observe("h", PROMPT_TOKEN, 0.5, 100)  # 5 ms per prompt token
    short = Work(steps=8, prompt_tokens=100)  # the unit costs predict 0.8 + 0.5 = 1.3 s
    meter.observe_run("h", "swap_test", 2.6, short)  # it took twice that (page drawing, tokenizing, …)
    long = Work(steps=64, prompt_tokens=100)  # 6.4 + 0.5 = 6.9 s predicted
    est = estimate_run("h", "swap_test", long, meter=meter)
    assert est.basis == RUN_BASIS and est.seconds == pytest.approx(2 * 6.9), "the ratio, times the new work"
    assert "scaled to this run" in est.describe()
    # a test that ended before the model (nothing to swap) predicts no work: it is its kind's fixed cost
    meter.observe_run("h", "swap_test", 0.3, Work())
    assert estimate_run("h", "swap_test", Work(), meter=meter).seconds == pytest.approx(0.3)
    assert estimate_run("h", "swap_test", long, meter=meter).seconds == pytest.approx(2 * 6.9), "ratios unmoved"


def test_the_ratio_of_a_kind_carries_to_a_model_without_runs_of_it() -> None:
    from core.engine.estimate import Work

    meter = CostMeter(clock=FakeClock(), pace=lambda: 1e-9)
    meter.set_params("smol", 100e6)
    meter.set_params("gemma", 300e6)
    meter.observe("smol", GENERATED_TOKEN, 1.0, 10)  # 0.1 s per step on smol: 1e-9 s per step per parameter
    meter.observe_run("smol", "dual_path", 3.0, Work(steps=10))  # 1 s predicted, 3 s actual: ratio 3
    est = estimate_run("gemma", "dual_path", Work(steps=10), meter=meter)
    assert est.seconds == pytest.approx(3 * 10 * 0.3) and not est.own, "smol's ratio × gemma's scaled units"
    assert "none like it on this model yet; one run on another" in est.describe()


def test_a_dual_path_estimate_follows_the_answers_length_once_known() -> None:
    from core.engine.estimate import budget_work, result_work

    meter = _meter()
    first = budget_work("h", 64, meter=meter)
    assert (first.steps_low, first.steps_high) == (8, 64), "before any answer: the prior shortest share to the budget"
    for used in (8, 12, 64):
        meter.observe_fill("h", used, 64)
    work = budget_work("h", 64, meter=meter)
    # from the shortest answer to the whole budget, centred where the worst factor is smallest: √(8 × 64) steps
    assert (work.steps, work.steps_low, work.steps_high) == (pytest.approx((8 * 64) ** 0.5), 8, 64)
    run = SimpleNamespace(
        n_tokens=42,
        parametric=SimpleNamespace(token_ids=list(range(42)), prompt_len=30),
        retrieval=SimpleNamespace(prompt_len=50),
    )
    done = result_work(run)
    assert done.steps == 42 and done.prompt_tokens == 50 + 2 * 30 + 42, "prefill of both prompts, then scoring"


def test_the_machine_pace_is_measured_once_per_process() -> None:
    from core.engine import pace

    pace.reset()
    calls = []
    try:
        assert pace.machine_pace(lambda: calls.append(1) or 2e-10) == pytest.approx(2e-10 * pace.STEP_PER_MATVEC)
        assert pace.machine_pace(lambda: calls.append(1) or 1.0) == pytest.approx(2e-10 * pace.STEP_PER_MATVEC)
        assert calls == [1]
    finally:
        pace.reset()
    assert pace.parameter_count("a string key") is None


def test_a_real_models_first_estimate_needs_no_earlier_run(tiny_handle) -> None:
    """Calibrate this model said "time not measured yet" for every budget before any run of the model: the unit
    costs now come from the model's own parameter count at this machine's pace."""
    from core.engine.estimate import PACE
    from core.engine.pace import parameter_count

    meter = CostMeter()
    found = estimate(tiny_handle, generated_tokens=240 * 64, forwards=960, meter=meter)
    assert found is not None and found.seconds > 0 and found.source == PACE
    assert meter.params(tiny_handle) == parameter_count(tiny_handle) > 0
    assert describe_estimate(found).startswith(("≈", "< 1 s")) and "not measured" not in describe_estimate(found)


def test_the_second_estimate_of_a_dual_path_run_is_what_is_left_once_the_answers_are_known(monkeypatch) -> None:
    from core.engine import estimate as module
    from core.engine.estimate import Work, dual_path_rest

    meter = _meter()
    monkeypatch.setattr(module, "METER", meter)
    assert dual_path_rest("h", 12, 100, 3.0) is None, "nothing measured, no size: no second estimate"
    meter.observe("h", GENERATED_TOKEN, 1.0, 10)  # 0.1 s per step
    meter.observe_run("h", DUAL_PATH, 4.0, Work(steps=10))  # 1 s predicted, 4 s taken: ratio 4
    # a 64-step run: 4 × 6.4 s in all; 20 s spent generating, so about 5.6 s are left (scoring, the agreement view)
    assert dual_path_rest("h", 64, 0, 20.0) == pytest.approx(4 * 6.4 - 20.0)
    assert dual_path_rest("h", 64, 0, 60.0) == 0.0, "never negative"
