"""The measured costs behind every time estimate: seconds per unit of work per model, and the runs of each kind.

:class:`Work` counts a run's units (decoding steps, prompt tokens read, whole forward passes); :class:`CostMeter`
keeps the last measurements of each unit per model handle, each model's parameter count, and the runs of each kind
(:mod:`core.engine.estimate` explains the model of cost and says the estimates); :func:`unit_cost` finds a unit's
cost for a model — its own measurements, another model's scaled by the parameter counts, or this machine's pace
(:mod:`core.engine.pace`) — and :func:`predict` adds up a :class:`Work`.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

GENERATED_TOKEN = "generated_token"
"""Unit: one greedy decoding step (of a batch: the dual path decodes both paths in one step)."""
FORWARD = "forward"
"""Unit: one forward pass over one prompt (teacher-forced scoring, a hooked trace, a context pass)."""
PROMPT_TOKEN = "prompt_token"
"""Unit: one prompt token read by a forward pass (a prefill, a teacher-forced pass)."""
UNITS = (GENERATED_TOKEN, FORWARD, PROMPT_TOKEN)

SMOOTHING = 0.3
"""Accepted by :class:`CostMeter` for callers of its former moving average; the median replaced it."""
WINDOW = 8
"""How many recent measurements per unit (and recent budget shares) the likely range is taken from."""
FILL = "fill"
"""The meter's record of the share of a token budget that runs used (not a unit of work)."""
FIXED_S = 1.0
"""A run of a kind that took less than this is taken as a fixed cost (not scaled by the work) by
:func:`estimate_run`."""
UNIT_BASIS = "units"
"""An :class:`Estimate` from the measured cost per generated token and per forward pass."""
RUN_BASIS = "runs"
"""An :class:`Estimate` from the measured wall time of earlier runs of the same kind."""
DUAL_PATH = "dual_path"
"""The kind of a Dual Path page run (both answers, scoring, the agreement view); work: a :class:`Work`."""
MEASURED, SCALED, PACE = "measured", "scaled", "pace"
"""Where a unit cost came from: this model's runs, another model's scaled by the parameter counts, or this
machine's pace per parameter (:func:`core.engine.pace.machine_pace`)."""


def fill_key(kind: str = "") -> str:
    """The meter's key of the budget shares of a kind of run (:data:`FILL` alone: a Dual Path run's answers)."""
    return f"{FILL}:{kind}" if kind else FILL


def _key(handle: Any) -> str:
    """The meter's key for a handle (or a string key given directly)."""
    if isinstance(handle, str):
        return handle
    info = getattr(handle, "info", None)
    return f"{getattr(handle, 'slug', getattr(info, 'name', 'model'))}@{getattr(info, 'device', '')}"


@dataclass(frozen=True)
class Work:
    """The units of work of one run: decoding ``steps`` (with their likely range ``steps_low``–``steps_high``
    when the answers' length is not known yet), ``prompt_tokens`` read by forward passes, whole ``forwards``."""

    steps: float = 0.0
    prompt_tokens: float = 0.0
    forwards: float = 0.0
    steps_low: float | None = None
    steps_high: float | None = None

    def __post_init__(self) -> None:
        if min(self.steps, self.prompt_tokens, self.forwards) < 0:
            raise ValueError("work must be non-negative")

    def __add__(self, other: Work) -> Work:
        low = (self.steps if self.steps_low is None else self.steps_low) + (
            other.steps if other.steps_low is None else other.steps_low
        )
        high = (self.steps if self.steps_high is None else self.steps_high) + (
            other.steps if other.steps_high is None else other.steps_high
        )
        return Work(self.steps + other.steps, self.prompt_tokens + other.prompt_tokens,
                    self.forwards + other.forwards, low, high)  # fmt: skip


@dataclass
class CostMeter:
    """The last :attr:`window` measurements of seconds per unit of work, per handle key and unit; the cost
    of a unit is their median; the runs of each kind; each handle's parameter count.

    A small lock guards the table (a bookkeeping lock: it never wraps a model call). ``smoothing`` is accepted
    and unused (the median replaced a moving average).
    """

    smoothing: float = SMOOTHING
    clock: Callable[[], float] = time.monotonic
    window: int = WINDOW
    pace: Callable[[], float] | None = None
    _counts: dict[tuple[str, str], int] = field(default_factory=dict)
    _recent: dict[tuple[str, str], deque[tuple[float, float]]] = field(default_factory=dict)
    _runs: dict[tuple[str, str], deque[tuple[float, float, float]]] = field(default_factory=dict)
    _ratios: dict[str, deque[tuple[float, str, float, float]]] = field(default_factory=dict)
    _params: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def _remember(self, key: tuple[str, str], value: float) -> None:
        """Keep ``value`` among the last :attr:`window` of ``key``, with the clock's time (under the lock)."""
        self._recent.setdefault(key, deque(maxlen=self.window)).append((float(self.clock()), value))

    def set_params(self, handle: Any, count: float) -> None:
        """Say how many parameters ``handle``'s model has (a handle with a model is counted on first use)."""
        with self._lock:
            self._params[_key(handle)] = float(count)

    def params(self, handle: Any) -> float | None:
        """The parameter count of ``handle``'s model (``None`` when unknown: a string key never set)."""
        key = _key(handle)
        with self._lock:
            if key in self._params:
                return self._params[key]
        from core.engine.pace import parameter_count

        count = None if isinstance(handle, str) else parameter_count(handle)
        if count:
            self.set_params(handle, count)
        return float(count) if count else None

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
            self._counts[key] = self._counts.get(key, 0) + 1
            self._remember(key, per_unit)

    def observe_fill(self, handle: Any, used: float, budget: float, kind: str = "") -> None:
        """Record that a run generated ``used`` of the ``budget`` tokens it was allowed (ignored unless
        ``0 < budget`` and ``0 ≤ used``; the share is capped at 1): a Dual Path run's answers, or with ``kind``
        the answers of that kind of run (:func:`fill_key`: SMA's answers to perturbed prompts are not a Dual Path
        run's)."""
        if not (math.isfinite(used) and math.isfinite(budget)) or budget <= 0 or used < 0:
            return
        with self._lock:
            self._remember((_key(handle), fill_key(kind)), min(1.0, float(used) / float(budget)))

    def observe_run(self, handle: Any, kind: str, seconds: float, work: float | Work) -> None:
        """Record that a whole run of ``kind`` did ``work`` in ``seconds`` of wall time: a :class:`Work` is kept
        as the ratio of the seconds to what the unit costs predict for it; a number (the kind's own unit: rows,
        a token budget) as it is. Ignored unless the seconds (and a number's work) are positive.

        Raises:
            ValueError: for an empty kind.
        """
        if not kind:
            raise ValueError("a run needs a kind (e.g. 'dual_path', 'detector:sma')")
        if isinstance(work, Work):
            found = predict(handle, work, meter=self)
            if found is None or not math.isfinite(seconds) or seconds <= 0:
                return  # a run that predicts no work (nothing to run) is kept as its fixed cost
            with self._lock:
                ratios = self._ratios.setdefault(kind, deque(maxlen=4 * self.window))
                ratios.append((float(self.clock()), _key(handle), float(seconds), found[0]))
            return
        if not (math.isfinite(seconds) and math.isfinite(work)) or seconds <= 0 or work <= 0:
            return
        with self._lock:
            runs = self._runs.setdefault((_key(handle), kind), deque(maxlen=self.window))
            runs.append((float(self.clock()), float(seconds), float(work)))

    def runs(self, handle: Any, kind: str) -> list[tuple[float, float, float]]:
        """The last :attr:`window` runs of ``kind`` as ``(clock time, seconds, work)``, oldest first (a
        :class:`Work` run's work is the seconds its units predicted)."""
        key = _key(handle)
        with self._lock:
            plain = list(self._runs.get((key, kind), ()))
            units = [(t, s, p) for t, k, s, p in self._ratios.get(kind, ()) if k == key]
        return plain + units[-self.window :]

    def ratios(self, handle: Any, kind: str) -> tuple[list[tuple[float, float]], bool]:
        """The last :attr:`window` :class:`Work` runs of ``kind`` as ``(seconds, predicted seconds)``: this
        handle's, else (``False``) those of other models."""
        key = _key(handle)
        with self._lock:
            rows = list(self._ratios.get(kind, ()))
        own = [(s, p) for _, k, s, p in rows if k == key]
        return (own[-self.window :], True) if own else ([(s, p) for _, _, s, p in rows][-self.window :], False)

    def recent(self, handle: Any, unit: str) -> list[tuple[float, float]]:
        """The last :attr:`window` measurements of ``unit`` (or :data:`FILL`) as ``(clock time, value)``,
        oldest first."""
        with self._lock:
            return list(self._recent.get((_key(handle), unit), ()))

    def fill(self, handle: Any, kind: str = "") -> float | None:
        """The median share of their token budget the last runs (of ``kind``) used, or ``None`` before any was
        measured."""
        shares = [v for _, v in self.recent(handle, fill_key(kind))]
        return statistics.median(shares) if shares else None

    def shares(self, handle: Any, kind: str = "") -> list[float]:
        """The budget shares the last runs (of ``kind``) of this model used, else those of any model (a first
        run's prior), oldest first; ``[]`` before any."""
        key = fill_key(kind)
        own = [v for _, v in self.recent(handle, key)]
        if own:
            return own
        with self._lock:
            rows = [v for (_, unit), q in self._recent.items() if unit == key for _, v in q]
        return rows[-self.window :]

    def per_parameter(self, unit: str, but: str) -> float | None:
        """The median seconds per ``unit`` per parameter of the models other than ``but`` that measured it."""
        with self._lock:
            rows = [(k, [v for _, v in q]) for (k, u), q in self._recent.items() if u == unit and k != but]
            params = dict(self._params)
        paces = [statistics.median(vs) / params[k] for k, vs in rows if vs and params.get(k)]
        return statistics.median(paces) if paces else None

    @contextmanager
    def timed(self, handle: Any, unit: str, units: float) -> Iterator[None]:
        """Measure the block with :attr:`clock` and record it as ``units`` of ``unit`` (only if it succeeds)."""
        start = self.clock()
        yield
        self.observe(handle, unit, self.clock() - start, units)

    def per_unit(self, handle: Any, unit: str) -> float | None:
        """The median seconds per ``unit`` of this handle's last :attr:`window` measurements, or ``None``
        before any."""
        values = [v for _, v in self.recent(handle, unit)]
        return statistics.median(values) if values else None

    def measurements(self, handle: Any, unit: str) -> int:
        """How many runs the average of ``unit`` is built from."""
        with self._lock:
            return self._counts.get((_key(handle), unit), 0)

    def clear(self) -> None:
        """Forget every measurement (tests)."""
        with self._lock:
            self._counts.clear()
            self._recent.clear()
            self._runs.clear()
            self._ratios.clear()


METER = CostMeter()
"""The process-wide meter every run reports to."""


def unit_cost(handle: Any, unit: str, meter: CostMeter | None = None) -> tuple[float, str] | None:
    """Seconds per ``unit`` on ``handle`` and where it came from (:data:`MEASURED`, :data:`SCALED`,
    :data:`PACE`): this model's measurements; else a unit it measured, converted (a forward ≈ a step, a step ≈ a
    forward); else other models' cost per parameter × this model's parameters; else this machine's pace per
    parameter. ``None`` when nothing is measured and the parameter count is unknown."""
    from core.engine.pace import PROMPT_TOKEN_PER_STEP, machine_pace

    meter = meter or METER
    own = meter.per_unit(handle, unit)
    if own is not None:
        return own, MEASURED
    step_ratio = {GENERATED_TOKEN: 1.0, FORWARD: 1.0, PROMPT_TOKEN: PROMPT_TOKEN_PER_STEP}
    for other in (GENERATED_TOKEN, FORWARD):  # another unit of this model, converted through a decoding step
        cost = meter.per_unit(handle, other) if other != unit else None
        if cost is not None:
            return cost * step_ratio[unit] / step_ratio[other], MEASURED
    params = meter.params(handle)
    if params is None:
        return None
    borrowed = meter.per_parameter(unit, _key(handle))
    if borrowed is not None:
        return borrowed * params, SCALED
    borrowed = meter.per_parameter(GENERATED_TOKEN, _key(handle))
    if borrowed is not None:
        return borrowed * params * step_ratio[unit], SCALED
    return (meter.pace or machine_pace)() * params * step_ratio[unit], PACE


def predict(
    handle: Any, work: Work, meter: CostMeter | None = None, steps: float | None = None
) -> tuple[float, str] | None:
    """The seconds the unit costs give for ``work`` (with ``steps`` in place of its steps, for its range) and the
    weakest basis among the units used; ``None`` when a unit's cost cannot be known (see :func:`unit_cost`)."""
    order = (MEASURED, SCALED, PACE)
    total, basis = 0.0, MEASURED
    for unit, amount in ((GENERATED_TOKEN, work.steps if steps is None else steps), (PROMPT_TOKEN, work.prompt_tokens),
                         (FORWARD, work.forwards)):  # fmt: skip
        if amount <= 0:
            continue
        found = unit_cost(handle, unit, meter)
        if found is None:
            return None
        total += amount * found[0]
        basis = max(basis, found[1], key=order.index)
    return total, basis
