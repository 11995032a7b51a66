"""How much model time an audit request asks for, and the slices in which requests share the model.

The audit service bounds the **work** of each request before it runs any of it (docs/audit.md, "Access and
limits"):

* **prompt tokens** — the retrieval and parametric prompts of every item (plus the answer tokens asked for with
  ``generate``), summed over the request, at most ``AuditLimits.max_request_tokens``;
* **time** — the model time the request would take on *this* server, estimated from what the server has
  measured (:class:`WorkMeter`), at most ``AuditLimits.request_budget_s``. A request over either is refused up
  front (413) with both figures; one that is accepted but then runs past its budget — queued behind other
  clients, on a machine that slowed down — is stopped at the next forward pass, and nothing is stored (503).

The estimate counts **units**: one forward pass of B rows padded to T tokens is ``B · T · (1 + T / T_attn)``
units — each token costs its layers' matrix products (∝ d² for hidden size d), plus attention over the T
positions before it (∝ T·d), which dominates beyond ``T_attn`` = :data:`ATTENTION_PER_HIDDEN` · d tokens (about
1,150 for the embedded model's d = 576, as measured with eager attention on a CPU; the figure is rough on
purpose: the deadline, not the estimate, is what guarantees the budget). Seconds per unit come from a probe
forward when the service starts, then from every forward it runs (an exponential moving average).

**Sharing the model.** An audit takes the model for one forward pass at a time, and a batch's rows are grouped so
that each pass is estimated to take at most :data:`FAIR_SLICE_S` (:meth:`WorkMeter.forward_tokens`; never less
than one row). Between passes, :class:`ModelTurns` gives the model to the waiting audit with the **least work
left** (its estimate, less the time it has waited: a large request that has waited as long as its remaining
work goes first, so it is not starved; its deadline bounds the wait in any case). So a single audit that arrives
while a batch runs waits for the one pass in flight, then runs both of its passes — not behind the rest of the
batch, nor behind every other pass of it.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

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


class ModelTurns:
    """Whose forward pass runs next, among the audits waiting for the model (thread-safe).

    Each waiting audit states the model time it still needs (``left_s``, its :class:`WorkPlan` estimate less the
    passes it has run). When the model is free, the audit with the smallest ``left_s − waited_s`` runs its next
    pass (ties: the first to ask). The model's own lock is still taken inside a turn (:mod:`core.model.handle`);
    turns only order the service's audits among themselves.
    """

    POLL_S = 0.25

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._busy = False
        self._waiting: dict[object, tuple[float, float, int]] = {}
        self._order = itertools.count()

    def waiting(self) -> int:
        """How many audits wait for a turn now."""
        with self._cond:
            return len(self._waiting)

    def _next(self) -> object:
        now = time.monotonic()

        def key(ticket: object) -> tuple[float, int]:
            left, since, order = self._waiting[ticket]
            return left - (now - since), order

        return min(self._waiting, key=key)

    @contextmanager
    def turn(self, left_s: float) -> Iterator[None]:
        """Wait for this audit's turn (it still needs ``left_s`` seconds of model time), hold it for the block.

        The run's cancel token (:func:`core.model.handle.check_cancelled`: a deadline, a shutdown) is checked
        while it waits.

        Raises:
            core.model.handle.RunCancelled: cancelled while waiting (the turn is given up).
        """
        ticket = object()
        with self._cond:
            self._waiting[ticket] = (float(left_s), time.monotonic(), next(self._order))
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


@dataclass
class RunShare:
    """One audit's share of the model: its :class:`ModelTurns`, the meter, and the model time it still needs."""

    turns: ModelTurns
    meter: WorkMeter
    left_s: float

    @contextmanager
    def forward(self, rows: int, width: int) -> Iterator[None]:
        """One forward pass of ``rows`` prompts padded to ``width`` tokens, in this audit's turn."""
        cost = self.meter.seconds(self.meter.units(rows, width))
        with self.turns.turn(self.left_s):
            try:
                yield
            finally:
                self.left_s = max(self.left_s - cost, 0.0)

    @contextmanager
    def block(self, seconds: float) -> Iterator[None]:
        """A stretch of model work estimated at ``seconds`` (a generation), in this audit's turn."""
        with self.turns.turn(self.left_s):
            try:
                yield
            finally:
                self.left_s = max(self.left_s - seconds, 0.0)
