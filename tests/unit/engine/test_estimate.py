"""core.engine.estimate: estimates from the costs measured in this process, scaled by the share of their token
budget recent runs used, with a likely range and the number of runs behind it (a fake clock, fake runs)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from core.engine.estimate import (
    FILL,
    FORWARD,
    GENERATED_TOKEN,
    CostMeter,
    Estimate,
    describe_estimate,
    estimate,
    estimate_seconds,
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
    assert est.low == pytest.approx(100 * 0.25 * 0.1) and est.high == pytest.approx(100 * 0.5 * 0.3)
    assert est.confidence == "rough", "a range of ×6 is rough"
    assert est.describe() == "≈ 8 s on this machine (likely 2–15 s, from 3 runs)"
    assert describe_estimate(est) == est.describe()


def test_one_run_is_rough_and_unknown_is_said_plainly() -> None:
    meter = _meter()
    assert estimate("h", generated_tokens=10, meter=meter) is None
    assert describe_estimate(None).startswith("time not measured yet")
    meter.observe("h", GENERATED_TOKEN, 30.0, 60)
    meter.observe("h", FORWARD, 1.0, 1)
    one = estimate("h", generated_tokens=64, forwards=1, meter=meter)
    assert one.runs == 1 and one.confidence == "rough" and not one.measured_fill
    assert (
        one.describe()
        == "≈ 35 s on this machine (rough: one run measured; if every answer uses its whole token budget)"
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
