"""Time estimates from measured costs per unit of work: "≈ 2 min on this machine" before a long run starts.

The model of cost. A run's work is counted in units (:class:`Work`): decoding steps (``GENERATED_TOKEN``: one
greedy step of a batch), prompt tokens read by forward passes (``PROMPT_TOKEN``) and whole forward passes
(``FORWARD``). Every run that times itself reports seconds and units (:func:`observe`, :func:`observe_result`); a
:class:`CostMeter` keeps, per model handle (its ``slug`` and device), the last :data:`WINDOW` seconds per unit and
uses their median (a warming-up first run does not weigh). A model with no measurement of a unit borrows another
model's, scaled by the two parameter counts (the cost of a step grows about with the weights read), and before any
model ran at all, this machine's pace per parameter (:func:`core.engine.pace.machine_pace`, a tiny timed product):
a model's first run is estimated from its size and the machine's pace, never "not measured yet".

Runs of a kind (``"dual_path"``, ``"swap_test"``, ``"detector:sma"``, …) also miss what the unit costs do not see
(the agreement view, page drawing, a detector's own arithmetic), so each kind records its wall time with the work
it did (:func:`observe_run`, :func:`measured_run`). With a :class:`Work`, the run is kept as the ratio of its wall
time to what the unit costs predicted for that work, and :func:`estimate_run` multiplies the prediction for the
work asked for by the median ratio of the last runs of the kind (their fastest and slowest: the range) — of this
model, else of the kind on other models; the work of a run whose length is only known afterwards (an answer's
steps) is the budget × the share of it recent answers used, with the smallest and largest share as the range. A
plain number as work (rows, a token budget) scales the last runs of the kind linearly, as before.

What an estimate can and cannot say: it extrapolates from the runs this process has seen; a busy CPU shared with
other users can be several times slower or faster than the last runs. It is an order of magnitude, shown with
"≈", never a promise. Measured against actual times: docs/performance.md#estimates.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from core.engine.cost_meter import (  # noqa: F401 (re-exported: callers import every estimate name from here)
    DUAL_PATH,
    FILL,
    FIXED_S,
    FORWARD,
    GENERATED_TOKEN,
    MEASURED,
    METER,
    PACE,
    PROMPT_TOKEN,
    RUN_BASIS,
    SCALED,
    SMOOTHING,
    UNIT_BASIS,
    UNITS,
    WINDOW,
    CostMeter,
    Work,
    predict,
    unit_cost,
)


def observe(handle: Any, unit: str, seconds: float, units: float) -> None:
    """Record a measurement in :data:`METER` (see :meth:`CostMeter.observe`)."""
    METER.observe(handle, unit, seconds, units)


def result_work(result: Any) -> Work:
    """The units of work of a dual-path result: its decoding steps (the longer answer), the prompts' tokens read
    by the batch's prefill and the teacher-forced pass over the parametric prompt and the retrieval answer."""
    retrieval, parametric = getattr(result, "retrieval", None), getattr(result, "parametric", None)
    r_len, p_len = int(getattr(retrieval, "prompt_len", 0) or 0), int(getattr(parametric, "prompt_len", 0) or 0)
    n = int(getattr(result, "n_tokens", 0) or 0)
    return Work(steps=answer_steps(result), prompt_tokens=r_len + 2 * p_len + n)


def observe_result(handle: Any, result: Any) -> None:
    """Record a dual-path result's own timings: its greedy generation (``timings["generate_s"]``: both paths
    decode in one batch of two, so the steps are the longer answer's tokens) and its scoring forward
    (``timings["score_s"]``, one teacher-forced pass, also per token read). The prompt's forward pass counts as
    one more step, so a short answer does not inflate the per-token cost."""
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
        read = int(getattr(parametric, "prompt_len", 0) or 0) + int(getattr(result, "n_tokens", 0) or 0)
        if read > 0:
            observe(handle, PROMPT_TOKEN, float(timings["score_s"]), read)


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
        source: where the unit costs came from (:data:`MEASURED`, :data:`SCALED` from another model,
            :data:`PACE`: this machine's pace per parameter).
        own: whether the runs of the kind were this model's (else other models', scaled).
        params: the model's parameter count, when the costs came from it.
        scaled: whether earlier runs of a :class:`Work` were scaled to this run's units of work.
    """

    seconds: float
    low: float
    high: float
    runs: int
    measured_fill: bool
    basis: str = UNIT_BASIS
    last_s: float | None = None
    source: str = MEASURED
    own: bool = True
    params: float | None = None
    scaled: bool = False

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
            if not self.own:
                runs = "one run" if self.runs < 2 else f"{self.runs} runs"
                spread = _range(self.low, self.high)
                return f"{head} (likely {spread}: none like it on this model yet; {runs} on another, {_source(self)})"
            if self.runs < 2:
                took = "" if self.last_s is None else f" took {self.last_s:.1f} s"
                return f"{head} (the last run like it{took}{'; scaled to this run' if self.scaled else ''})"
            spread = _range(self.low, self.high)
            scaled = ", scaled to this run's work" if self.scaled else ""
            return f"{head} (likely {spread}: the last {self.runs} runs like it{scaled})"
        if self.source != MEASURED:
            spread = f"likely {_range(self.low, self.high)}; " if self.high > self.low * 1.2 else ""
            return f"{head} ({spread}no run of this model yet: {_source(self)})"
        if self.runs < 1:
            spread = (
                f"likely {_range(self.low, self.high)}, depending on the answers' length; "
                if self.high > self.low * 1.2
                else ""
            )
            return f"{head} ({spread}no run like it measured yet: from the cost per token)"
        source = "one run" if self.runs < 2 else f"{self.runs} runs"
        if not self.measured_fill:
            return f"{head} (at most: if every answer uses its whole token budget; from the cost per token of {source})"
        spread = ""
        if self.high > self.low:
            spread = f"likely {_range(self.low, self.high)}, depending on the answers' length; "
        return f"{head} ({spread}from the cost per token of {source})"


def _source(est: Estimate) -> str:
    """Where a first run's unit costs came from, in words."""
    size = "" if est.params is None else f"{est.params / 1e6:,.0f} M parameters"
    if est.params is not None and est.params < 1e6:
        size = f"{est.params:,.0f} parameters"
    if est.source == PACE:
        return f"its {size or 'size'} at this machine's pace, measured by a timed matrix product"
    if est.source == SCALED:
        return f"another model's measured cost per token, scaled to its {size or 'size'}"
    return "this model's measured cost per token"


def _range(low: float, high: float) -> str:
    """``"15–40 s"``, ``"1–3 min"``, ``"40 s – 2 min"`` or ``"under 2 s"`` (the ≈ of :func:`format_seconds`
    dropped)."""
    a, b = format_seconds(low).removeprefix("≈ "), format_seconds(high).removeprefix("≈ ")
    if a == b:
        return a
    if a.startswith("<"):
        return f"under {b}"
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
    shares = _shares(handle, meter)
    share = statistics.median(shares) if shares else 1.0
    central = low = high = 0.0
    sources = []
    for unit, amount, factor in ((GENERATED_TOKEN, generated_tokens, batch_factor), (FORWARD, forwards, 1.0)):
        if amount <= 0:
            continue
        found = unit_cost(handle, unit, meter)
        if found is None:
            return None
        cost, source = found
        small, large, mid = (min(shares), max(shares), share) if unit == GENERATED_TOKEN and shares else (1, 1, 1)
        central += amount * mid * cost * factor
        low += amount * factor * cost * small
        high += amount * factor * cost * large
        sources.append(source)
    low, high = min(low, central), max(high, central)
    runs = min(
        (meter.measurements(handle, u) for u in (GENERATED_TOKEN, FORWARD) if meter.per_unit(handle, u)), default=0
    )
    source = max(sources, key=(MEASURED, SCALED, PACE).index, default=MEASURED)
    return Estimate(central, low, high, min(runs, WINDOW), bool(shares) and generated_tokens > 0, source=source,
                    params=meter.params(handle) if source != MEASURED else None)  # fmt: skip


def _shares(handle: Any, meter: CostMeter) -> list[float]:
    """The budget shares recent Dual Path answers of this model used, else those of any model (a first run's
    prior)."""
    return meter.shares(handle)


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


def dual_path_work(handle: Any, max_new_tokens: int, query: str = "", context: str = "") -> Work:
    """A Dual Path run's units of work before it runs: ``max_new_tokens`` × the share of their budget recent
    answers used (:func:`budget_work`), the prompts' prefill (query + context, and the query alone) and the
    scoring pass over the parametric prompt and the answer (:func:`result_work` counts the same afterwards)."""
    with_context, alone = prompt_tokens(handle, query, context), prompt_tokens(handle, query)
    work = budget_work(handle, max_new_tokens)
    return Work(work.steps, with_context + 2 * alone + work.steps, steps_low=work.steps_low, steps_high=work.steps_high)


def dual_path_run_estimate(handle: Any, max_new_tokens: int, query: str = "", context: str = "") -> Estimate | None:
    """The estimate under the Dual Path page's Run button: :func:`dual_path_work` × the ratio of the last Dual
    Path runs' whole wait (answers, scoring, the agreement view, drawing) to their own units of work."""
    return estimate_run(handle, DUAL_PATH, dual_path_work(handle, max_new_tokens, query, context))


def dual_path_rest(handle: Any, steps: float, prompt_tokens: float, elapsed: float) -> float | None:
    """The second estimate of a Dual Path run, once its answers are generated and their length is known: what the
    last Dual Path runs' ratio says the whole run takes for that work, less the ``elapsed`` seconds already spent
    (the scoring pass, the agreement view and the drawing are what is left); ``None`` when nothing is known."""
    found = estimate_run(handle, DUAL_PATH, Work(steps=float(steps), prompt_tokens=float(prompt_tokens)))
    return None if found is None else max(0.0, found.seconds - float(elapsed))


def observe_dual_path(handle: Any, seconds: float, result: Any) -> None:
    """Record a Dual Path page run's whole wait with the units of work it did (:func:`result_work`)."""
    observe_run(handle, DUAL_PATH, seconds, result_work(result))


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
    work: float | Work,
    fallback: Estimate | float | None = None,
    *,
    meter: CostMeter | None = None,
) -> Estimate | None:
    """How long a run of ``kind`` doing ``work`` will take: from the last runs of that kind when there are some,
    else ``fallback`` (a unit-cost :func:`estimate`, a number of seconds, or ``None``).

    With a :class:`Work`: the unit costs' prediction for it × the median ratio of actual to predicted seconds of
    the last runs of the kind on this model (else on other models; else 1, the unit costs alone, unless a
    ``fallback`` is given), the range from the fastest and slowest ratios and the work's range of steps.

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
    if isinstance(work, Work):
        return _estimate_work(handle, kind, work, fallback, meter or METER)
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


def _as_estimate(fallback: Estimate | float | None) -> Estimate | None:
    """A fallback as an :class:`Estimate` (a number of seconds: a point estimate)."""
    if fallback is None or isinstance(fallback, Estimate):
        return fallback
    seconds = float(fallback)
    return Estimate(seconds, seconds, seconds, 0, False)


def _estimate_work(
    handle: Any, kind: str, work: Work, fallback: Estimate | float | None, meter: CostMeter
) -> Estimate | None:
    """:func:`estimate_run` for a :class:`Work` (see there)."""
    found = predict(handle, work, meter)
    if found is None:
        return _as_estimate(fallback)
    predicted, source = found
    lows = predict(handle, work, meter, steps=work.steps_low if work.steps_low is not None else work.steps)
    highs = predict(handle, work, meter, steps=work.steps_high if work.steps_high is not None else work.steps)
    low, high = min(predicted, lows[0] if lows else predicted), max(predicted, highs[0] if highs else predicted)
    found_pairs, own = meter.ratios(handle, kind)
    params = meter.params(handle) if source != MEASURED or not own else None
    if predicted <= 0:  # nothing the unit costs see: what such runs of the kind took (a fixed cost)
        fixed = [s for s, p in found_pairs if p <= 0]
        if not fixed:
            return Estimate(0.0, 0.0, 0.0, 0, True, source=source, params=params)
        mid = statistics.median(fixed)
        return Estimate(mid, min(fixed), max(fixed), len(fixed), True, basis=RUN_BASIS, last_s=fixed[-1])
    pairs = [(s, p) for s, p in found_pairs if p > 0]
    if not pairs:
        if fallback is not None:
            return _as_estimate(fallback)
        return Estimate(predicted, low, high, 0, work.steps_low is not None, source=source, params=params)
    ratios = [s / p for s, p in pairs]
    mid = statistics.median(ratios)
    return Estimate(mid * predicted, min(ratios) * low, max(ratios) * high, len(pairs), True, basis=RUN_BASIS,
                    last_s=pairs[-1][0], source=source, own=own, params=params, scaled=True)  # fmt: skip


PRIOR_SHARE = 8 / 64
"""The shortest share of its budget an answer is taken to use before any was measured (the bundled examples'
shortest answer: 8 of 64 steps)."""


def budget_work(handle: Any, budget: float, prompt_tokens: float = 0.0, meter: CostMeter | None = None) -> Work:
    """A run that decodes up to ``budget`` steps whose length is not known yet. Its range: from the shortest share
    of their budget recent answers used to the whole budget (an answer without the context often runs to it: 64
    steps after 8- and 12-step ones on the bundled examples); its central figure the geometric mean of the two, the
    one figure whose worst factor over that range is smallest (before any answer was measured, the shortest share is
    :data:`PRIOR_SHARE`)."""
    shares = _shares(handle, meter or METER) or [PRIOR_SHARE]
    low = budget * min(shares)
    return Work(math.sqrt(low * budget), float(prompt_tokens), steps_low=low, steps_high=float(budget))


def kind_budget_work(handle: Any, kind: str, budget: float, *, meter: CostMeter | None = None) -> Work:
    """The decoding steps of answers of ``kind`` of at most ``budget`` tokens each, not generated yet: ``budget`` ×
    the median share of it the last runs of the kind used (this model's, else other models'), the range from their
    smallest share to the whole budget. Unlike :func:`budget_work` (a Dual Path run, whose answer without the context
    often runs to the budget after short ones), the answers of a kind that repeats generations (Self-Critique's r₂,
    SMA's answers to perturbed prompts) are alike from run to run. Before any run of the kind, its answers are taken
    as :func:`budget_work` takes a Dual Path run's: between the shortest share recent answers used and the whole
    budget, at their geometric mean (taking the whole budget made SMA's first estimate 2.08× its time)."""
    if budget < 0:
        raise ValueError(f"a token budget must be non-negative, got {budget}")
    shares = (meter or METER).shares(handle, kind)
    if not shares:
        return budget_work(handle, budget, meter=meter)
    return Work(budget * statistics.median(shares), steps_low=budget * min(shares), steps_high=float(budget))


def observe_kind_fill(handle: Any, kind: str, used: float, budget: float) -> None:
    """Record that a run of ``kind`` generated ``used`` of the ``budget`` tokens its answers were allowed (the
    share :func:`kind_budget_work` reads)."""
    METER.observe_fill(handle, used, budget, kind)


def prompt_tokens(handle: Any, *texts: str, template: int = 24) -> int:
    """About how many tokens a prompt of ``texts`` has (its tokenizer's count plus ``template`` for the chat
    template; 0 for a handle without a tokenizer)."""
    tok = getattr(handle, "tokenizer", None)
    if tok is None:
        return 0
    try:
        return sum(len(tok.encode(t, add_special_tokens=False)) for t in texts if t) + template
    except (TypeError, ValueError, AttributeError):  # an estimate: an odd tokenizer only costs the prompt
        return 0
