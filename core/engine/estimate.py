"""Time estimates from measured costs: "≈ 2 min on this machine" before a long run starts.

Every run that times itself reports here (:func:`observe`): seconds spent and the units of work done —
generated tokens (``GENERATED_TOKEN``: one decoding step of one sequence) or forward passes over a prompt
(``FORWARD``). A :class:`CostMeter` keeps, per model handle (its :attr:`~core.model.handle.ModelHandle.slug`
plus its device), an exponential moving average of the seconds per unit, so estimates follow the machine's
current load. Before a run, :func:`estimate_seconds` multiplies the work it will do by those averages.

What an estimate can and cannot say: it extrapolates from the runs this process has seen on this handle; a
batch generates several sequences per step (``batch_factor`` is a rough allowance for that), and a busy CPU
shared with other users can be several times slower or faster than the last runs. It is an order of
magnitude, shown with "≈", never a promise.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Any

GENERATED_TOKEN = "generated_token"
"""Unit: one greedy decoding step of one sequence."""
FORWARD = "forward"
"""Unit: one forward pass over one prompt (teacher-forced scoring, a hooked trace, a context pass)."""
UNITS = (GENERATED_TOKEN, FORWARD)

SMOOTHING = 0.3
"""Weight of the newest measurement in the moving average (0.3: the last ~3 runs dominate)."""


def _key(handle: Any) -> str:
    """The meter's key for a handle (or a string key given directly)."""
    if isinstance(handle, str):
        return handle
    info = getattr(handle, "info", None)
    return f"{getattr(handle, 'slug', getattr(info, 'name', 'model'))}@{getattr(info, 'device', '')}"


@dataclass
class CostMeter:
    """Moving averages of seconds per unit of work, per handle key and unit.

    A small lock guards the table (a bookkeeping lock: it never wraps a model call).
    """

    smoothing: float = SMOOTHING
    _averages: dict[tuple[str, str], float] = field(default_factory=dict)
    _counts: dict[tuple[str, str], int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def observe(self, handle: Any, unit: str, seconds: float, units: float) -> None:
        """Record that ``units`` of ``unit`` took ``seconds`` (ignored when either is not positive and finite).

        Raises:
            ValueError: for an unknown unit.
        """
        if unit not in UNITS:
            raise ValueError(f"unit must be one of {', '.join(UNITS)}, got {unit!r}")
        if not (math.isfinite(seconds) and math.isfinite(units)) or seconds <= 0 or units <= 0:
            return
        per_unit = float(seconds) / float(units)
        key = (_key(handle), unit)
        with self._lock:
            old = self._averages.get(key)
            self._averages[key] = per_unit if old is None else (1 - self.smoothing) * old + self.smoothing * per_unit
            self._counts[key] = self._counts.get(key, 0) + 1

    def per_unit(self, handle: Any, unit: str) -> float | None:
        """The average seconds per ``unit`` for this handle, or ``None`` before any measurement."""
        with self._lock:
            return self._averages.get((_key(handle), unit))

    def measurements(self, handle: Any, unit: str) -> int:
        """How many runs the average of ``unit`` is built from."""
        with self._lock:
            return self._counts.get((_key(handle), unit), 0)

    def clear(self) -> None:
        """Forget every measurement (tests)."""
        with self._lock:
            self._averages.clear()
            self._counts.clear()


METER = CostMeter()
"""The process-wide meter every run reports to."""


def observe(handle: Any, unit: str, seconds: float, units: float) -> None:
    """Record a measurement in :data:`METER` (see :meth:`CostMeter.observe`)."""
    METER.observe(handle, unit, seconds, units)


def observe_result(handle: Any, result: Any) -> None:
    """Record a dual-path result's own timings: its greedy generation (``timings["generate_s"]``: both paths
    decode in one batch of two, so the steps are the longer answer's tokens) and its scoring forward
    (``timings["score_s"]``, one teacher-forced pass). The prompt's forward pass counts as one more step, so a
    short answer does not inflate the per-token cost."""
    timings = getattr(result, "timings", None) or {}
    parametric = getattr(result, "parametric", None)
    steps = max(int(getattr(result, "n_tokens", 0) or 0), len(getattr(parametric, "token_ids", ()) or ()))
    if "generate_s" in timings:  # + 1: the prompt's own forward pass costs about one step
        observe(handle, GENERATED_TOKEN, float(timings["generate_s"]), steps + 1)
    if "score_s" in timings:
        observe(handle, FORWARD, float(timings["score_s"]), 1)


def estimate_seconds(
    handle: Any,
    *,
    generated_tokens: float = 0.0,
    forwards: float = 0.0,
    batch_factor: float = 1.0,
    meter: CostMeter | None = None,
) -> float | None:
    """Seconds a run will take: ``generated_tokens × s/token × batch_factor + forwards × s/forward``.

    Args:
        generated_tokens: decoding steps the run makes (a batch of b sequences × n tokens counts n steps;
            pass ``batch_factor`` for the extra cost of the wider batch).
        forwards: forward passes over a prompt.
        batch_factor: multiplier on the per-token cost for batched decoding (≥ 1).

    Returns:
        ``None`` when a unit the run needs has never been measured on this handle.

    Raises:
        ValueError: negative work or a batch factor below 1.
    """
    if generated_tokens < 0 or forwards < 0:
        raise ValueError("work must be non-negative")
    if batch_factor < 1.0:
        raise ValueError(f"batch_factor must be >= 1, got {batch_factor}")
    meter = meter or METER
    total = 0.0
    for unit, amount, factor in ((GENERATED_TOKEN, generated_tokens, batch_factor), (FORWARD, forwards, 1.0)):
        if amount <= 0:
            continue
        rate = meter.per_unit(handle, unit)
        if rate is None:
            # A forward over a prompt costs about one decoding step when nothing else is known.
            fallback = meter.per_unit(handle, GENERATED_TOKEN if unit == FORWARD else FORWARD)
            if fallback is None:
                return None
            rate = fallback
        total += amount * rate * factor
    return total


def format_seconds(seconds: float | None) -> str:
    """``"≈ 40 s"``, ``"≈ 2 min"``, ``"≈ 1.5 h"``; ``"unknown"`` for ``None``."""
    if seconds is None or not math.isfinite(seconds):
        return "unknown"
    if seconds < 1.0:
        return "< 1 s"
    if seconds < 90:
        return f"≈ {max(1, round(seconds / 5) * 5) if seconds >= 10 else round(seconds)} s"
    if seconds < 90 * 60:
        return f"≈ {round(seconds / 60)} min"
    return f"≈ {seconds / 3600:.1f} h"


def describe_estimate(seconds: float | None) -> str:
    """A sentence for the page: ``"≈ 2 min on this machine"``, or a plain "not measured yet"."""
    if seconds is None:
        return "time not measured yet on this machine (run Dual Path once)"
    return f"{format_seconds(seconds)} on this machine"
