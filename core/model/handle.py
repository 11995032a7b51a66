"""The shared :class:`ModelHandle`: the one door to a loaded model.

A handle bundles a causal LM, its tokenizer, a re-entrant lock and a few facts about the model. One handle is
shared by every session of the app (``st.cache_resource``), by the CLI and by the audit server, so the handle
owns its lock: callers run the model through it and never take the lock themselves.

* :meth:`ModelHandle.forward` and :meth:`ModelHandle.generate` — one call, under the lock and
  ``torch.inference_mode()``.
* :meth:`ModelHandle.session` — a context manager for a run of several calls that must not interleave with
  another session's (e.g. a hooked run: install hooks, run two passes, remove hooks). It is re-entrant, so
  ``forward``/``generate`` may be called inside it.
* :meth:`ModelHandle.hooked` — a session that registers forward hooks on entry and removes every one of them
  in ``finally``, whatever happens.

Nothing may mutate a shared handle.

**Fair sharing.** The lock is first come, first served (:class:`_FairLock`): runs get the model in the order
they asked for it, :meth:`ModelHandle.waiting` says how many are queued and :meth:`ModelHandle.runs_ahead` how
many are ahead of a waiting caller. A caller (the app) may wrap its run in :func:`run_control` with a
:class:`CancelToken` and an ``on_wait(runs_ahead)`` callback: while queued the callback is called about every
0.25 s, and the token is checked while queued, on entering every :meth:`ModelHandle.session` (so before every
``forward``/``generate``) and, through ``core.engine.generation.CancelCriteria``, at every generated token. A
cancelled run raises :class:`RunCancelled` (or whatever the token's check raises); the lock is always released
on the way out, because every hold of it is a ``with`` block.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import torch

from core.io import AsDict

HookRegistration = Callable[[], torch.utils.hooks.RemovableHandle]
"""A zero-argument callable that registers one hook and returns its removable handle."""


class ModelLoadError(RuntimeError):
    """A model could not be loaded; the message says why and what to do."""


class RunCancelled(RuntimeError):
    """A run was cancelled through its :class:`CancelToken` (while queued, or at a token or batch boundary)."""


class CancelToken:
    """Cooperative cancellation of one run: cancelled explicitly, or when a check says so.

    Args:
        check: optional callable polled by :meth:`raise_if_cancelled`; it returns ``True`` when the run should
            end (the token then stays cancelled), or raises an exception of its own (which propagates as is;
            the app raises Streamlit's stop exception for a closed browser tab this way).

    Example::

        token = CancelToken()
        with run_control(cancel=token):
            run_dual_path(handle, query, context, settings)   # another thread: token.cancel()
    """

    def __init__(self, check: Callable[[], bool] | None = None) -> None:
        self._event = threading.Event()
        self._check = check
        self.reason = ""

    def cancel(self, reason: str = "cancelled") -> None:
        """Ask the run to end at its next token, batch or model call (thread-safe)."""
        self.reason = self.reason or reason
        self._event.set()

    @property
    def cancelled(self) -> bool:
        """Whether the run should end (polls the check: a check that fails with an ``Exception`` counts as "end";
        a ``BaseException`` it raises, such as Streamlit's stop exception, propagates)."""
        if self._event.is_set():
            return True
        if self._check is not None:
            try:
                if self._check():
                    self.cancel("the check asked to stop")
            except Exception:  # noqa: BLE001 - a failing check is treated as "stop"
                self.cancel("the check failed")
        return self._event.is_set()

    def raise_if_cancelled(self) -> None:
        """Raise :class:`RunCancelled` when cancelled (the check may raise its own exception instead)."""
        if not self._event.is_set() and self._check is not None and self._check():
            self.cancel("the check asked to stop")
        if self._event.is_set():
            raise RunCancelled(f"The run was cancelled ({self.reason}).")


WaitCallback = Callable[[int], None]
"""``on_wait(runs_ahead)``: called while a run is queued (``runs_ahead >= 1``), then once with 0 when it starts."""


@dataclass(frozen=True)
class RunControl:
    """What the current thread's runs are governed by (see :func:`run_control`)."""

    cancel: CancelToken | None = None
    on_wait: WaitCallback | None = None


_CONTROL: ContextVar[RunControl | None] = ContextVar("read_or_recall_run_control", default=None)


@contextmanager
def run_control(cancel: CancelToken | None = None, on_wait: WaitCallback | None = None) -> Iterator[RunControl]:
    """Govern every model call of this thread inside the block by ``cancel`` and report queueing to ``on_wait``.

    Nested blocks replace the outer one until they end. Code below the app (engine, methods, evaluation) needs
    no parameter for this: :meth:`ModelHandle.session` and :class:`CancelCriteria` read it.
    """
    control = RunControl(cancel, on_wait)
    reset = _CONTROL.set(control)
    try:
        yield control
    finally:
        _CONTROL.reset(reset)


def install_run_control(cancel: CancelToken | None = None, on_wait: WaitCallback | None = None) -> RunControl:
    """Govern every later model call of this thread by ``cancel`` / ``on_wait``, until replaced.

    For a thread that runs one script at a time and has no natural ``with`` block around it (the app's script
    thread: :func:`components.queue.watch` calls this at the start of every page run). Elsewhere prefer
    :func:`run_control`.
    """
    control = RunControl(cancel, on_wait)
    _CONTROL.set(control)
    return control


def current_control() -> RunControl | None:
    """The :class:`RunControl` of this thread, if a :func:`run_control` block is open."""
    return _CONTROL.get()


StepCallback = Callable[[], None]
"""``on_step()``: called after every generation step of every ``generate`` of the thread (see :func:`on_each_step`)."""

_STEP: ContextVar[StepCallback | None] = ContextVar("read_or_recall_step", default=None)


@contextmanager
def on_each_step(callback: StepCallback) -> Iterator[None]:
    """Call ``callback()`` after every generated token step of this thread's generations inside the block.

    A progress report for callers that see only whole batches (the Evaluate page scores one batch in one
    call): ``core.engine.generation.CancelCriteria`` reports each step of a batched ``generate``, one step
    being one new token for every row of the batch. Nested blocks replace the outer one until they end.
    """
    reset = _STEP.set(callback)
    try:
        yield
    finally:
        _STEP.reset(reset)


def report_step() -> None:
    """Tell this thread's :func:`on_each_step` listener that one generation step finished (a no-op without one)."""
    callback = _STEP.get()
    if callback is not None:
        callback()


def check_cancelled() -> None:
    """Raise when this thread's run was cancelled (a no-op outside :func:`run_control`). Cheap: call it at every
    token, batch or loop step."""
    control = _CONTROL.get()
    if control is not None and control.cancel is not None:
        control.cancel.raise_if_cancelled()


class _FairLock:
    """A re-entrant, first-come-first-served lock that knows its queue.

    ``threading.RLock`` wakes waiters in no particular order, so a visitor could wait behind runs that asked
    later; here each waiting thread holds a ticket and the oldest ticket gets the lock.
    """

    POLL_S = 0.25

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._owner: int | None = None
        self._depth = 0
        self._queue: deque[object] = deque()

    def acquire(self, cancel: CancelToken | None = None, on_wait: WaitCallback | None = None) -> None:
        me = threading.get_ident()
        with self._cond:
            if self._owner == me:
                self._depth += 1
                return
            if self._owner is None and not self._queue:
                self._owner, self._depth = me, 1
                return
            ticket = object()
            self._queue.append(ticket)
        acquired = waited = False
        try:
            while True:
                with self._cond:
                    if self._owner is None and self._queue[0] is ticket:
                        self._queue.popleft()
                        self._owner, self._depth = me, 1
                        acquired = True
                        break
                    ahead = self._queue.index(ticket) + (self._owner is not None)
                if cancel is not None:
                    cancel.raise_if_cancelled()
                if on_wait is not None:
                    on_wait(ahead)
                    waited = True
                with self._cond:
                    if not (self._owner is None and self._queue[0] is ticket):
                        self._cond.wait(self.POLL_S)
        finally:
            if not acquired:
                with self._cond:
                    self._queue.remove(ticket)
                    self._cond.notify_all()
        if waited and on_wait is not None:
            try:
                on_wait(0)
            except BaseException:
                self.release()
                raise

    def release(self) -> None:
        with self._cond:
            if self._owner != threading.get_ident():
                raise RuntimeError("release of a model lock this thread does not hold")
            self._depth -= 1
            if self._depth == 0:
                self._owner = None
                self._cond.notify_all()

    def held_by_other(self) -> bool:
        with self._cond:
            return self._owner is not None and self._owner != threading.get_ident()

    def held(self) -> bool:
        with self._cond:
            return self._owner is not None

    def waiting(self) -> int:
        with self._cond:
            return len(self._queue)


@dataclass(frozen=True)
class ModelInfo(AsDict):
    """Facts about a loaded model (all plain Python values, JSON-serializable)."""

    name: str
    source: str
    n_layers: int
    n_heads: int
    hidden_size: int
    vocab_size: int
    device: str
    dtype: str
    max_tokens: int
    has_chat_template: bool

    @property
    def is_embedded(self) -> bool:
        """Whether this is the embedded model (the one whose calibrated files ship in ``assets/``): the one way
        to ask, used by every per-model file lookup (:mod:`core.model.artifacts`) and :attr:`ModelHandle.slug`."""
        from core.model.loading import EMBEDDED_NAME  # loading imports this module

        return self.name == EMBEDDED_NAME


class ModelHandle:
    """A loaded model shared by many sessions.

    Attributes:
        model: the causal LM in eval mode.
        tokenizer: its tokenizer (never mutated).
        info: :class:`ModelInfo`.
    """

    def __init__(self, model: torch.nn.Module, tokenizer: Any, info: ModelInfo) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.info = info
        self._lock = _FairLock()

    # -- running the model --------------------------------------------------------------------------------

    @contextmanager
    def session(self) -> Iterator[torch.nn.Module]:
        """Hold the model for a run of several calls: the lock and ``torch.inference_mode()``.

        Queued behind other runs in the order they asked (reporting to the :func:`run_control`'s ``on_wait``);
        the run's :class:`CancelToken` is checked while queued and on entry, and the lock is released on every
        way out (a return, an exception, a cancellation).

        Yields:
            The model. Re-entrant: nested sessions, ``forward`` and ``generate`` inside it are fine.

        Raises:
            RunCancelled: the run was cancelled before or while it waited.
        """
        control = _CONTROL.get()
        cancel = control.cancel if control is not None else None
        self._lock.acquire(cancel, control.on_wait if control is not None else None)
        try:
            if cancel is not None:
                cancel.raise_if_cancelled()
            with torch.inference_mode():
                yield self.model
        finally:
            self._lock.release()

    def forward(self, **inputs: Any) -> Any:
        """One forward pass ``model(**inputs)`` under the lock and inference mode."""
        with self.session() as model:
            return model(**inputs)

    def generate(self, **kwargs: Any) -> Any:
        """``model.generate(**kwargs)`` under the lock and inference mode."""
        with self.session() as model:
            return model.generate(**kwargs)

    @contextmanager
    def hooked(self, registrations: Sequence[HookRegistration]) -> Iterator[torch.nn.Module]:
        """A :meth:`session` with forward hooks: registered on entry, every one removed in ``finally``.

        Args:
            registrations: callables that each register one hook and return its handle.
        """
        with self.session() as model:
            handles: list[torch.utils.hooks.RemovableHandle] = []
            try:
                for register in registrations:
                    handles.append(register())
                yield model
            finally:
                for h in handles:
                    h.remove()

    def is_busy(self) -> bool:
        """Whether another thread holds the model right now (a hint for the UI; may change at once)."""
        return self._lock.held_by_other()

    def waiting(self) -> int:
        """How many runs are queued for the model right now (not counting the one that holds it)."""
        return self._lock.waiting()

    def runs_ahead(self) -> int:
        """How many runs a run that asked for the model now would wait for: the queue plus the running one."""
        return self._lock.waiting() + int(self._lock.held())

    # -- facts ----------------------------------------------------------------------------------------------

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def eos_token_ids(self) -> list[int]:
        """Token ids that end an answer (the generation config's and the tokenizer's)."""
        ids: list[int] = []
        gen_eos = getattr(self.model.generation_config, "eos_token_id", None)
        for value in (gen_eos, self.tokenizer.eos_token_id):
            if value is None:
                continue
            for v in value if isinstance(value, (list, tuple)) else [value]:
                if int(v) not in ids:
                    ids.append(int(v))
        return ids

    @property
    def pad_token_id(self) -> int:
        """Token id used to left-pad batches (the tokenizer's pad token, else the first EOS id)."""
        if self.tokenizer.pad_token_id is not None:
            return int(self.tokenizer.pad_token_id)
        eos = self.eos_token_ids
        return eos[0] if eos else 0

    @property
    def slug(self) -> str:
        """The file-name-safe key of this model for every per-model cache file (:func:`core.io.model_slug`)."""
        from core.io import model_slug

        return model_slug(self.info.name, self.info.source, embedded=self.info.is_embedded)

    def decode_tokens(self, ids: list[int]) -> list[str]:
        """Each id as its own readable string (byte-level pieces decoded one by one)."""
        return [self.tokenizer.decode([int(i)]) for i in ids]

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"ModelHandle({self.info.name!r}, {self.info.device}, {self.info.dtype})"
