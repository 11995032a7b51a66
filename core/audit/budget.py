"""How much model time an audit request asks for, and the slices in which requests share the model.

The audit service bounds the **work** of each request before it runs any of it (docs/audit.md, "Access and
limits"):

* **prompt tokens** — the retrieval and parametric prompts of every item (plus the answer tokens asked for with
  ``generate``), summed over the request, at most ``AuditLimits.max_request_tokens``;
* **time** — the model time the request would take on *this* server, estimated from what the server has
  measured (:class:`WorkMeter`), at most ``AuditLimits.request_budget_s``. A request over it is refused up front
  (413) with both figures. A request that fits is accepted only when the model time it needs still fits beside
  what the requests already accepted were promised (:meth:`ModelTurns.admit`; 503 up front otherwise), so the
  sharing never makes an accepted request miss its deadline. One that runs past it all the same — the machine
  slowed down after it was accepted, the estimate was low — is stopped at its next forward pass, and nothing is
  stored (503).

The estimate counts **units**: one forward pass of B rows padded to T tokens is ``B · T · (1 + T / T_attn)``
units — each token costs its layers' matrix products (∝ d² for hidden size d), plus attention over the T
positions before it (∝ T·d), which dominates beyond ``T_attn`` = :data:`ATTENTION_PER_HIDDEN` · d tokens (about
1,150 for the embedded model's d = 576, as measured with eager attention on a CPU; the figure is rough on
purpose: the deadline, not the estimate, is what guarantees the budget). Seconds per unit come from a probe
forward when the service starts, then from every forward it runs (an exponential moving average).

**Sharing the model.** An audit takes the model for one forward pass at a time, and a batch's rows are grouped so
that each pass is estimated to take at most :data:`FAIR_SLICE_S` (:meth:`WorkMeter.forward_tokens`; never less
than one row). Between passes, :class:`ModelTurns` gives the model to an accepted audit that has fallen more than
:data:`LAG_S` behind its schedule (its work spread evenly from its arrival to its planned finish, 90 % of its
budget), else to the waiting audit with the **least work left** (its estimate, less the time it has waited). So a
single audit that arrives while a batch runs on schedule waits for the one pass in flight, then runs both of its
passes; a batch that other clients' passes have pushed behind its schedule takes the model back until it is on
it again, so it finishes within its budget.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from core.engine.batch import plan_batches
from core.model.handle import ModelHandle, check_cancelled

ATTENTION_TOKENS = 1024.0
"""``T_attn`` before the model is known: the prompt length at which attention costs as much per token as the
rest of a forward pass."""
ATTENTION_PER_HIDDEN = 2.0
"""``T_attn`` per unit of hidden size (:meth:`WorkMeter.probe` sets ``T_attn = 2 · d``; rough)."""
FAIR_SLICE_S = 0.25
"""Longest a batch's forward pass is planned to hold the model (seconds), so other clients get their turn."""
PROBE_TOKENS = 64
"""Length of the probe forward that gives the first seconds-per-unit figure when the service starts."""
DECODE_STEP_UNITS = 4.0
"""Units of one generated token of one row besides its attention (a decode step is launch-bound)."""
MAX_FORWARD_TOKENS = 8192
"""Most padded tokens of one forward pass, however fast the model (bounds the activations' memory)."""
FINISH_MARGIN = 0.1
"""Share of a request's time budget kept back when the service plans when it will finish (its last pass, the
commit, the turns' granularity): an accepted request is planned to be done by 90 % of its budget."""
LAG_S = FAIR_SLICE_S
"""How far behind its schedule (seconds of model time) an accepted request may fall before its passes go first."""


def forward_units(rows: int, width: int, attention_tokens: float = ATTENTION_TOKENS) -> float:
    """Units of one forward pass of ``rows`` prompts padded to ``width`` tokens: ``rows·width·(1 + width/T_attn)``."""
    return float(rows) * float(width) * (1.0 + float(width) / attention_tokens)


@dataclass(frozen=True)
class WorkPlan:
    """What one request asks of the model.

    Attributes:
        tokens: prompt tokens of both paths over all items, plus the answer tokens asked for (``generate``).
        units: the estimated work (:func:`forward_units` summed over the planned forwards).
        seconds: the estimated model time on this server (:meth:`WorkMeter.seconds`).
        forward_tokens: the padded tokens per forward pass the batch is grouped by (one fair slice each).
    """

    tokens: int
    units: float
    seconds: float
    forward_tokens: int


class WorkMeter:
    """Seconds per unit of model work on this server, measured (thread-safe).

    Args:
        seconds_per_unit: a starting figure (``None``: :meth:`probe` sets it; until then 1 ms per unit).
        slice_s: the fair slice (:data:`FAIR_SLICE_S`).
        smoothing: weight of a new measurement in the moving average (0 … 1).
        attention_tokens: ``T_attn`` (:meth:`probe` sets it from the model's hidden size).
    """

    def __init__(
        self,
        seconds_per_unit: float | None = None,
        *,
        slice_s: float = FAIR_SLICE_S,
        smoothing: float = 0.3,
        attention_tokens: float = ATTENTION_TOKENS,
    ) -> None:
        if slice_s <= 0 or not 0 < smoothing <= 1 or attention_tokens <= 0:
            raise ValueError(
                f"need slice_s > 0, smoothing in (0, 1] and attention_tokens > 0, got {slice_s}, {smoothing}, "
                f"{attention_tokens}"
            )
        self.slice_s = float(slice_s)
        self.smoothing = float(smoothing)
        self.attention_tokens = float(attention_tokens)
        self._rate = float(seconds_per_unit) if seconds_per_unit else 1e-3
        self._lock = threading.Lock()

    def units(self, rows: int, width: int) -> float:
        """:func:`forward_units` with this meter's ``T_attn``."""
        return forward_units(rows, width, self.attention_tokens)

    @property
    def seconds_per_unit(self) -> float:
        """The current figure (seconds per unit of work)."""
        with self._lock:
            return self._rate

    def probe(self, handle: ModelHandle, tokens: int = PROBE_TOKENS) -> float:
        """Time one forward pass of ``tokens`` tokens (after a short warm-up) and start from that figure; set
        ``T_attn`` to :data:`ATTENTION_PER_HIDDEN` times the model's hidden size.

        Returns:
            The measured seconds per unit.
        """
        self.attention_tokens = max(ATTENTION_PER_HIDDEN * float(handle.info.hidden_size), 1.0)
        vocab = max(int(handle.info.vocab_size), 2)
        ids = (torch.arange(tokens, dtype=torch.long) % (vocab - 1) + 1)[None, :].to(handle.device)
        handle.forward(input_ids=ids[:, :8], use_cache=False)  # warm-up: first-call allocations
        t0 = time.perf_counter()
        handle.forward(input_ids=ids, use_cache=False)
        rate = max((time.perf_counter() - t0) / self.units(1, tokens), 1e-12)
        with self._lock:
            self._rate = rate
        return rate

    def observe(self, rows: int, width: int, seconds: float) -> None:
        """Fold one measured forward pass (``rows`` prompts padded to ``width`` tokens, ``seconds`` holding the
        model) into the figure; ignored when it is not a positive time."""
        units = self.units(rows, width)
        if not (units > 0 and seconds > 0 and math.isfinite(seconds)):
            return
        with self._lock:
            self._rate += self.smoothing * (seconds / units - self._rate)

    def seconds(self, units: float) -> float:
        """Estimated model time of ``units`` of work (seconds)."""
        return units * self.seconds_per_unit

    def forward_tokens(self, width: int) -> int:
        """Padded tokens per forward pass for prompts of up to ``width`` tokens: as many as fit one fair slice,
        at least one row (``width``) and at most :data:`MAX_FORWARD_TOKENS`."""
        per_token = self.seconds_per_unit * (1.0 + width / self.attention_tokens)
        fit = int(self.slice_s / per_token) if per_token > 0 else MAX_FORWARD_TOKENS
        return max(int(width), min(fit, MAX_FORWARD_TOKENS))

    def plan(
        self,
        retrieval: Sequence[int],
        parametric: Sequence[int],
        *,
        batch_size: int,
        new_tokens: int = 0,
    ) -> WorkPlan:
        """The work of auditing pairs whose prompts have these lengths (tokens), grouped as the audit runs them.

        Args:
            retrieval, parametric: each pair's prompt lengths.
            batch_size: most rows per forward pass.
            new_tokens: answer tokens per pair when the request asks to generate (0: no generation).
        """
        if not retrieval:
            return WorkPlan(0, 0.0, 0.0, 0)
        per_forward = self.forward_tokens(max(retrieval))
        units = 0.0
        for chunk in plan_batches(list(retrieval), batch_size, 0, per_forward):
            units += self.units(len(chunk), max(retrieval[i] for i in chunk))
            units += self.units(len(chunk), max(parametric[i] for i in chunk))
        if new_tokens:
            for r, p in zip(retrieval, parametric):  # prefill, steps with attention over the prompt, the forced pass
                units += self.units(1, r) + self.units(1, p + new_tokens)
                units += new_tokens * (DECODE_STEP_UNITS + (r + new_tokens) / self.attention_tokens)
        tokens = int(sum(retrieval) + sum(parametric) + 2 * new_tokens * len(retrieval))
        return WorkPlan(tokens, units, self.seconds(units), per_forward)


class ModelBusy(Exception):
    """A request refused before any model work: beside the requests already accepted, it would not finish within
    its time budget (:meth:`ModelTurns.admit`).

    Attributes:
        promised: the share of the model the accepted requests need from now to their planned finish (0 … 1+).
        own_s: the refused request's own estimated model time (seconds).
        retry_after_s: roughly when the accepted requests will have finished (their estimated model time left).
    """

    def __init__(self, promised: float, own_s: float, retry_after_s: float) -> None:
        super().__init__(f"the model is {promised:.0%} promised; {own_s:.1f} s more does not fit")
        self.promised = promised
        self.own_s = own_s
        self.retry_after_s = retry_after_s


class ModelTurns:
    """The accepted audits' reservations of the model, and whose forward pass runs next (thread-safe).

    **Admission** (:meth:`admit`). Each accepted audit is planned to finish by :data:`FINISH_MARGIN` short of its
    deadline (arrival + time budget): from now until then it needs ``left_s / (finish − now)`` of the model — its
    *density*. A new audit is accepted when the densities of those already accepted plus its own are at most 1
    (it is accepted whatever its density when it would run alone); otherwise it is refused with
    :class:`ModelBusy` before any model work. Sharing therefore never makes an accepted audit miss its deadline:
    the model time it was promised was set aside when it was accepted.

    **Turns** (:meth:`turn`). Each accepted audit has a schedule — its work done at an even pace from its arrival
    to its planned finish. When the model is free, an audit more than :data:`LAG_S` of model time behind its
    schedule goes first (the earliest planned finish among such); otherwise the audit with the smallest
    ``left_s − waited_s`` runs its next pass (ties: the first to ask), so a single audit that arrives while a batch
    is on schedule waits for the one pass in flight. The model's own lock is still taken inside a turn
    (:mod:`core.model.handle`); turns only order the service's audits among themselves.
    """

    POLL_S = 0.25

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._busy = False
        self._waiting: dict[object, tuple[float, float, int, RunShare | None]] = {}
        self._runs: set[RunShare] = set()
        self._order = itertools.count()

    def waiting(self) -> int:
        """How many audits wait for a turn now."""
        with self._cond:
            return len(self._waiting)

    def promised(self) -> float:
        """The share of the model the accepted audits need from now to their planned finish (their densities)."""
        with self._cond:
            now = time.monotonic()
            return sum(run.density(now) for run in self._runs)

    def admit(self, meter: WorkMeter, plan: WorkPlan, arrived: float, budget_s: float) -> RunShare:
        """Accept an audit (``plan``, arrived at ``arrived`` on :func:`time.monotonic`, due ``budget_s`` later):
        its reservation, held until :meth:`release`.

        Raises:
            ModelBusy: beside the audits already accepted it would not finish in its budget (nothing reserved).
        """
        finish = arrived + (1.0 - FINISH_MARGIN) * float(budget_s)
        share = RunShare(self, meter, plan.units, arrived=arrived, finish=finish)
        with self._cond:
            now = time.monotonic()
            promised = sum(run.density(now) for run in self._runs)
            if self._runs and promised + share.density(now) > 1.0:
                left = sum(run.left_s for run in self._runs)
                raise ModelBusy(promised, plan.seconds, left if math.isfinite(left) else budget_s)
            self._runs.add(share)
        return share

    def release(self, share: RunShare) -> None:
        """End an accepted audit's reservation (it finished, failed or was stopped)."""
        with self._cond:
            self._runs.discard(share)
            self._cond.notify_all()

    def _next(self) -> object:
        now = time.monotonic()
        behind = [
            (share.finish, order, ticket)
            for ticket, (_, _, order, share) in self._waiting.items()
            if share is not None and share.lag_s(now) > LAG_S
        ]
        if behind:  # an accepted audit behind its schedule: the earliest planned finish first
            return min(behind, key=lambda item: item[:2])[2]

        def key(ticket: object) -> tuple[float, int]:
            left, since, order, _ = self._waiting[ticket]
            return left - (now - since), order

        return min(self._waiting, key=key)

    @contextmanager
    def turn(self, left_s: float, share: RunShare | None = None) -> Iterator[None]:
        """Wait for this audit's turn (it still needs ``left_s`` seconds of model time; ``share``: its
        reservation, whose schedule may put it first), hold it for the block.

        The run's cancel token (:func:`core.model.handle.check_cancelled`: a deadline, a shutdown) is checked
        while it waits.

        Raises:
            core.model.handle.RunCancelled: cancelled while waiting (the turn is given up).
        """
        ticket = object()
        with self._cond:
            self._waiting[ticket] = (float(left_s), time.monotonic(), next(self._order), share)
            try:
                while self._busy or self._next() is not ticket:
                    check_cancelled()
                    self._cond.wait(self.POLL_S)
                self._busy = True
            finally:
                del self._waiting[ticket]
                self._cond.notify_all()
        try:
            yield
        finally:
            with self._cond:
                self._busy = False
                self._cond.notify_all()


@dataclass(eq=False)
class RunShare:
    """One accepted audit's share of the model (:meth:`ModelTurns.admit`): its turns, the meter, the work it still
    needs (units) and its schedule — from ``arrived`` to its planned ``finish`` (:func:`time.monotonic`)."""

    turns: ModelTurns
    meter: WorkMeter
    units_left: float
    arrived: float = 0.0
    finish: float = math.inf
    units_total: float = field(default=-1.0)

    def __post_init__(self) -> None:
        if self.units_total < 0:
            self.units_total = self.units_left

    @property
    def left_s(self) -> float:
        """The model time it still needs, at the meter's current rate (seconds)."""
        return self.meter.seconds(self.units_left)

    def density(self, now: float) -> float:
        """The share of the model it needs from ``now`` to its planned finish (``inf`` past it with work left)."""
        if self.units_left <= 0:
            return 0.0
        return self.left_s / (self.finish - now) if self.finish > now else math.inf

    def lag_s(self, now: float) -> float:
        """How far behind its even-paced schedule it is, in model time (seconds; negative: ahead)."""
        if not math.isfinite(self.finish) or self.finish <= self.arrived:
            return 0.0
        due = self.units_total * min((now - self.arrived) / (self.finish - self.arrived), 1.0)
        return self.meter.seconds(due - (self.units_total - self.units_left))

    def _spend(self, units: float) -> None:
        self.units_left = max(self.units_left - units, 0.0)

    @contextmanager
    def forward(self, rows: int, width: int) -> Iterator[None]:
        """One forward pass of ``rows`` prompts padded to ``width`` tokens, in this audit's turn."""
        cost = self.meter.units(rows, width)
        with self.turns.turn(self.left_s, self):
            try:
                yield
            finally:
                self._spend(cost)

    @contextmanager
    def block(self, seconds: float) -> Iterator[None]:
        """A stretch of model work estimated at ``seconds`` (a generation), in this audit's turn."""
        rate = self.meter.seconds_per_unit
        with self.turns.turn(self.left_s, self):
            try:
                yield
            finally:
                self._spend(seconds / rate if rate > 0 else self.units_left)
