"""components.progress (issue 14): a bar that moves with every generated token and never fills past the unit in
progress."""

from __future__ import annotations

import pytest

from core.engine import DualPathSettings

pytestmark = pytest.mark.usefixtures("one_thread")


class _Bar:
    def __init__(self) -> None:
        self.values: list[tuple[float, str]] = []

    def progress(self, value: float, text: str = "") -> None:
        self.values.append((value, text))


def test_a_noise_sweep_bar_moves_with_every_token_of_the_run_in_progress(tiny_handle) -> None:
    from components.progress import GENERATION_SHARE as SHARE
    from components.progress import StepTicker
    from core.methods.ablation import layer_sweep

    bar = _Bar()
    runs = 1 + tiny_handle.info.n_layers
    ticker = StepTicker(bar, steps_per_unit=3, total=runs)
    ticker.MIN_INTERVAL_S = 0.0
    settings = DualPathSettings(max_new_tokens=3, force_length=True)
    with ticker.listening():
        grid = layer_sweep(
            tiny_handle, "Q?", "C.", settings, 0.5, (0,), max_new_tokens=3,
            progress=lambda d, t, label: ticker.report(d, t, f"{d} / {t} runs"),
        )  # fmt: skip
    assert grid.z.shape == (tiny_handle.info.n_layers, 1)
    values = [v for v, _ in bar.values]
    assert values == sorted(values) and values[-1] == 1.0, "monotone, ends full"
    tokens = [(v, t) for v, t in bar.values if "next: token" in t]
    assert len(tokens) == 3 * runs, "every token of every run (the clean one too) moved the bar"
    assert tokens[0] == (pytest.approx(SHARE / 3 / runs), "Starting… · next: token 1")
    first_after_clean = next(v for v, t in bar.values if t == f"1 / {runs} runs · next: token 1")
    assert first_after_clean == pytest.approx((1 + SHARE / 3) / runs)


def test_a_step_ticker_never_fills_past_the_unit_in_progress() -> None:
    from components.progress import StepTicker

    bar = _Bar()
    ticker = StepTicker(bar, steps_per_unit=4, unit_size=8)
    ticker.MIN_INTERVAL_S = 0.0
    ticker.report(8, 20, "8 / 20 generations")
    for _ in range(10):  # more steps than a unit takes (a call split in two): capped
        ticker.step()
    assert bar.values[-1][0] == pytest.approx((8 + 0.9 * 8) / 20)
    ticker.report(16, 20, "16 / 20 generations")
    ticker.step()
    assert bar.values[-1][0] == pytest.approx((16 + 0.9 * 4 * (1 / 4)) / 20), "only 4 generations are left"
