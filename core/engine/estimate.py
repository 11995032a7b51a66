"""Time estimates from measured costs: "≈ 2 min on this machine" before a long run starts.

Every run that times itself reports here (:func:`observe`): seconds spent and the units of work done —
generated tokens (``GENERATED_TOKEN``: one decoding step of one sequence) or forward passes over a prompt
(``FORWARD``). A :class:`CostMeter` keeps, per model handle (its :attr:`~core.model.handle.ModelHandle.slug`
plus its device), the last :data:`WINDOW` measurements of the seconds per unit, and estimates use their
median, so they follow the machine's current load and a first, warming-up run (0.68 s per step against 0.20 and
0.16 s for the next two on the embedded model) does not weigh on them. Before a run, :func:`estimate_seconds`
multiplies the work it will do by those medians.

Token budgets, not token counts: callers pass the most decoding steps a run may make (``max_new_tokens`` per
generation), but most answers stop early at the end-of-sequence token. Each dual-path result therefore also
reports the share of its budget it used (:meth:`CostMeter.observe_fill`), and an estimate multiplies the budget
by the median share of the last runs (the whole budget until one is measured). Without this, a Self-Critique
of 3 × 64 budgeted tokens was estimated at ≈ 6 min and took 24 s.

How sure: the meter also keeps the last :data:`WINDOW` measurements of each unit (with the time they were
taken, from an injectable clock), and :func:`estimate` returns an :class:`Estimate` with a likely range: the median
cost per unit times the smallest and the largest share of the budget recent answers used — the answer's length is
what a run's time mostly depends on. (The fastest and slowest costs are not used: the slowest is the first,
warming-up run, and multiplying both spreads gave ranges such as "1 s – 2 min" that said nothing.)

Runs of a kind: the unit costs miss what a run does besides decoding — the agreement view after a Dual Path run,
SMA's perturbations and batches, Self-Critique's two generations of different lengths, page drawing — so a
2-unit model was off by 2–6× on some kinds (SMA estimated at 20 s took 45 s; Self-Critique 40 s took 15 s). Each
kind of run a page offers (``"dual_path"``, ``"detector:sma"``, …) therefore records its own wall time and the
size of its work in the kind's own unit (its token budget, its rows) when it ends (:func:`observe_run`,
:func:`measured_run`); :func:`estimate_run` then scales the last :data:`WINDOW` runs of that kind to the work
asked for (their median seconds per unit of work), with their fastest and slowest as the likely range, and falls
back to the unit model only before the first run of the kind (a run under a second did no real generation and
counts as a fixed cost, not scaled). After one run, the next estimate of that kind is
that run's time, scaled: within 2× of the actual on the bundled examples (``bench/estimates_page.py``;
docs/performance.md#estimates).

What an estimate can and cannot say: it extrapolates from the runs this process has seen on this handle; a
batch generates several sequences per step (``batch_factor`` is a rough allowance for that), and a busy CPU
shared with other users can be several times slower or faster than the last runs. It is an order of
magnitude, shown with "≈", never a promise.
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
"""Unit: one greedy decoding step of one sequence."""
FORWARD = "forward"
"""Unit: one forward pass over one prompt (teacher-forced scoring, a hooked trace, a context pass)."""
UNITS = (GENERATED_TOKEN, FORWARD)

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
"""The kind of a Dual Path page run (both answers, scoring, the agreement view); work: its token budget."""


def _key(handle: Any) -> str:
    """The meter's key for a handle (or a string key given directly)."""
    if isinstance(handle, str):
        return handle
    info = getattr(handle, "info", None)
    return f"{getattr(handle, 'slug', getattr(info, 'name', 'model'))}@{getattr(info, 'device', '')}"


@dataclass
class CostMeter:
    """The last :attr:`window` measurements of seconds per unit of work, per handle key and unit; the cost
    of a unit is their median.

    A small lock guards the table (a bookkeeping lock: it never wraps a model call). ``smoothing`` is accepted
    and unused (the median replaced a moving average).
    """

    smoothing: float = SMOOTHING
    clock: Callable[[], float] = time.monotonic
    window: int = WINDOW
    _counts: dict[tuple[str, str], int] = field(default_factory=dict)
    _recent: dict[tuple[str, str], deque[tuple[float, float]]] = field(default_factory=dict)
    _runs: dict[tuple[str, str], deque[tuple[float, float, float]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def _remember(self, key: tuple[str, str], value: float) -> None:
        """Keep ``value`` among the last :attr:`window` of ``key``, with the clock's time (under the lock)."""
        self._recent.setdefault(key, deque(maxlen=self.window)).append((float(self.clock()), value))

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

    def observe_fill(self, handle: Any, used: float, budget: float) -> None:
        """Record that a run generated ``used`` of the ``budget`` tokens it was allowed (ignored unless
        ``0 < budget`` and ``0 ≤ used``; the share is capped at 1)."""
        if not (math.isfinite(used) and math.isfinite(budget)) or budget <= 0 or used < 0:
            return
        with self._lock:
            self._remember((_key(handle), FILL), min(1.0, float(used) / float(budget)))

    def observe_run(self, handle: Any, kind: str, seconds: float, work: float) -> None:
        """Record that a whole run of ``kind`` did ``work`` (in the kind's own unit: a token budget, rows) in
        ``seconds`` of wall time (ignored unless both are positive and finite).

        Raises:
            ValueError: for an empty kind.
        """
        if not kind:
            raise ValueError("a run needs a kind (e.g. 'dual_path', 'detector:sma')")
        if not (math.isfinite(seconds) and math.isfinite(work)) or seconds <= 0 or work <= 0:
            return
        with self._lock:
            runs = self._runs.setdefault((_key(handle), kind), deque(maxlen=self.window))
            runs.append((float(self.clock()), float(seconds), float(work)))

    def runs(self, handle: Any, kind: str) -> list[tuple[float, float, float]]:
        """The last :attr:`window` runs of ``kind`` as ``(clock time, seconds, work)``, oldest first."""
        with self._lock:
            return list(self._runs.get((_key(handle), kind), ()))

    def recent(self, handle: Any, unit: str) -> list[tuple[float, float]]:
        """The last :attr:`window` measurements of ``unit`` (or :data:`FILL`) as ``(clock time, value)``,
        oldest first."""
        with self._lock:
            return list(self._recent.get((_key(handle), unit), ()))

    def fill(self, handle: Any) -> float | None:
        """The median share of their token budget the last runs used, or ``None`` before any was measured."""
        shares = [v for _, v in self.recent(handle, FILL)]
        return statistics.median(shares) if shares else None

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
        budget = (getattr(result, "settings", None) or {}).get("max_new_tokens")
        if budget:
            METER.observe_fill(handle, steps, float(budget))
    if "score_s" in timings:
        observe(handle, FORWARD, float(timings["score_s"]), 1)


@dataclass(frozen=True)
class Estimate:
    """How long a run will take, and how sure that is.

    Attributes:
        seconds: the central estimate: for :data:`RUN_BASIS`, the work × the median seconds per unit of work of
            the last runs of the kind; for :data:`UNIT_BASIS`, median cost per unit × the budget's median used
            share.
        low, high: the likely range: the fastest and slowest of those runs, scaled to the work; for
            :data:`UNIT_BASIS`, the median cost × the smallest and the largest share of the budget recent
            answers used.
        runs: the measurements behind it (runs of the kind; else the fewest among the units the run needs).
        measured_fill: whether the budget was scaled by a measured share (else the whole budget counts; always
            true for :data:`RUN_BASIS`, whose runs include their answers' lengths).
        basis: :data:`RUN_BASIS` or :data:`UNIT_BASIS`.
        last_s: the wall time of the last run of the kind (:data:`RUN_BASIS`), as measured.
    """

    seconds: float
    low: float
    high: float
    runs: int
    measured_fill: bool
    basis: str = UNIT_BASIS
    last_s: float | None = None

    @property
    def confidence(self) -> str:
        """``"rough"`` (one run, or a range wider than ×3), ``"fair"`` (wider than ×1.5) or ``"good"``."""
        ratio = self.high / self.low if self.low > 0 else math.inf
        if self.runs < 2 or ratio > 3:
            return "rough"
        return "fair" if ratio > 1.5 else "good"

    def describe(self) -> str:
        """What the page says under a button, e.g. ``"≈ 25 s on this machine (likely 20–30 s: the last 3 runs like
        it)"``, ``"≈ 15 s on this machine (the last run like it took 14.6 s)"`` or, before any run of the kind,
        ``"≈ 8 s on this machine (likely 5–15 s, depending on the answers' length; from the cost per token of
        4 runs)"``."""
        head = f"{format_seconds(self.seconds)} on this machine"
        if self.basis == RUN_BASIS:
            if self.runs < 2:
                took = "" if self.last_s is None else f" took {self.last_s:.1f} s"
                return f"{head} (the last run like it{took})"
            return f"{head} (likely {_range(self.low, self.high)}: the last {self.runs} runs like it)"
        if self.runs < 1:
            return f"{head} (no run like it measured yet: from the cost per token)"
        source = "one run" if self.runs < 2 else f"{self.runs} runs"
        if not self.measured_fill:
            return f"{head} (at most: if every answer uses its whole token budget; from the cost per token of {source})"
        spread = ""
        if self.high > self.low:
            spread = f"likely {_range(self.low, self.high)}, depending on the answers' length; "
        return f"{head} ({spread}from the cost per token of {source})"


def _range(low: float, high: float) -> str:
    """``"15–40 s"``, ``"1–3 min"`` or ``"40 s – 2 min"`` (the ≈ of :func:`format_seconds` dropped)."""
    a, b = format_seconds(low).removeprefix("≈ "), format_seconds(high).removeprefix("≈ ")
    if a == b:
        return a
    unit_a, unit_b = a.rsplit(" ", 1)[-1], b.rsplit(" ", 1)[-1]
    if unit_a == unit_b and not a.startswith("<"):
        return f"{a.rsplit(' ', 1)[0]}–{b}"
    return f"{a} – {b}"


def estimate(
    handle: Any,
    *,
    generated_tokens: float = 0.0,
    forwards: float = 0.0,
    batch_factor: float = 1.0,
    meter: CostMeter | None = None,
) -> Estimate | None:
    """How long a run will take from the unit costs, ``generated_tokens × share × s/token × batch_factor + forwards
    × s/forward`` (medians of the recent measurements), with its likely range: the same with the smallest and the
    largest recent share (:data:`UNIT_BASIS`; prefer :func:`estimate_run` for a kind of run that records itself).

    Args:
        generated_tokens: the most decoding steps the run may make, its token budget (a batch of b sequences ×
            n tokens counts n steps; pass ``batch_factor`` for the extra cost of the wider batch). It is scaled
            by ``share``, the median share of their budget the last runs used (1 before any was measured).
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
    shares = [v for _, v in meter.recent(handle, FILL)]
    central = low = high = 0.0
    runs = []
    for unit, amount, factor in ((GENERATED_TOKEN, generated_tokens, batch_factor), (FORWARD, forwards, 1.0)):
        if amount <= 0:
            continue
        # A forward over a prompt costs about one decoding step when nothing else is known.
        costs = [v for _, v in meter.recent(handle, unit)] or [
            v for _, v in meter.recent(handle, GENERATED_TOKEN if unit == FORWARD else FORWARD)
        ]
        if not costs:
            return None
        share = (meter.fill(handle) or 1.0) if unit == GENERATED_TOKEN else 1.0
        small, large = (min(shares), max(shares)) if unit == GENERATED_TOKEN and shares else (1.0, 1.0)
        cost = statistics.median(costs)
        central += amount * share * cost * factor
        low += amount * factor * cost * small
        high += amount * factor * cost * large
        runs.append(len(costs))
    low, high = min(low, central), max(high, central)
    return Estimate(central, low, high, min(runs, default=0), bool(shares) and generated_tokens > 0)


def estimate_seconds(handle: Any, **work: Any) -> float | None:
    """The central figure of :func:`estimate` (same arguments) in seconds; ``None`` when a unit the run needs
    has never been measured on this handle."""
    found = estimate(handle, **work)
    return None if found is None else found.seconds


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


def describe_estimate(seconds: float | Estimate | None) -> str:
    """A sentence for the page: ``"≈ 2 min on this machine"`` (with its likely range for an :class:`Estimate`),
    or a plain "not measured yet" (before any run on this handle: the first run measures it)."""
    if seconds is None:
        return "time not measured yet on this machine (the first run measures it)"
    if isinstance(seconds, Estimate):
        return seconds.describe()
    return f"{format_seconds(seconds)} on this machine"


def dual_path_estimate(handle: Any, max_new_tokens: int) -> Estimate | None:
    """A dual-path run: both paths decode in one batch of two (``max_new_tokens`` steps at most), then one
    teacher-forced scoring pass."""
    return estimate(handle, generated_tokens=max_new_tokens, forwards=1)


def answer_steps(result: Any) -> int:
    """The decoding steps a dual-path run's longer answer took (≥ 1; both paths decode in one batch).

    The work unit of a run that repeats generations on the same example (a costly detector, the Self-Critique and
    SMA pages): their answers are about as long as the run's own, and the answer's length, not the token budget,
    is what their time follows (Self-Critique took 8.5 s on an example whose answers took 12 steps and 84 s on one
    whose parametric answer ran to the 64-token budget)."""
    parametric = getattr(result, "parametric", None)
    steps = max(int(getattr(result, "n_tokens", 0) or 0), len(getattr(parametric, "token_ids", ()) or ()))
    return max(1, steps)


def observe_run(handle: Any, kind: str, seconds: float, work: float) -> None:
    """Record a whole run of ``kind`` in :data:`METER` (see :meth:`CostMeter.observe_run`)."""
    METER.observe_run(handle, kind, seconds, work)


@contextmanager
def measured_run(handle: Any, kind: str, work: float, meter: CostMeter | None = None) -> Iterator[None]:
    """Time the block with the meter's clock and record it as a run of ``kind`` that did ``work`` — only when it
    ends without an exception (a failed run is not a measurement)."""
    meter = meter or METER
    start = meter.clock()
    yield
    meter.observe_run(handle, kind, meter.clock() - start, work)


def estimate_run(
    handle: Any,
    kind: str,
    work: float,
    fallback: Estimate | float | None = None,
    *,
    meter: CostMeter | None = None,
) -> Estimate | None:
    """How long a run of ``kind`` doing ``work`` will take: from the last runs of that kind when there are some,
    else ``fallback`` (a unit-cost :func:`estimate`, a number of seconds, or ``None``).

    From runs: each of the last :data:`WINDOW` runs of the kind scaled to ``work`` (its seconds × ``work`` / its
    work; a run under :data:`FIXED_S` as it is: no generation to scale), central = their median, likely range =
    their fastest and slowest (:data:`RUN_BASIS`).

    Args:
        kind: the kind of run, as recorded by :func:`observe_run` / :func:`measured_run`.
        work: the size of the run in the kind's own unit (the same unit its runs were recorded in), > 0.
        fallback: what to say before any run of the kind.

    Raises:
        ValueError: when ``work`` is not positive.
    """
    if not work > 0:
        raise ValueError(f"work must be positive, got {work}")
    runs = (meter or METER).runs(handle, kind)
    if not runs:
        if fallback is None or isinstance(fallback, Estimate):
            return fallback
        seconds = float(fallback)
        return Estimate(seconds, seconds, seconds, 0, False)
    # each run scaled to this work; a run under FIXED_S did no real generation (one decoding step of the embedded
    # model alone takes ~0.1–0.2 s), so its time is what it costs whatever the work (CRM L1: 0.1–0.4 s)
    scaled = [seconds if seconds < FIXED_S else seconds * work / done for _, seconds, done in runs]
    return Estimate(
        statistics.median(scaled),
        min(scaled),
        max(scaled),
        len(runs),
        True,
        basis=RUN_BASIS,
        last_s=runs[-1][1],
    )
