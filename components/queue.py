"""Fair sharing of the one model between browser sessions: "queued: N runs ahead", and abandoned runs cancelled.

Every page run starts with :func:`watch` (called by :func:`components.page.open_page`). It installs a
:class:`~core.model.handle.RunControl` on the script thread, so every model call the page makes (through the
handle, at any depth of ``core``) is governed by it:

* **Queueing.** The handle serves runs first come, first served. While this session's run waits, a notice is
  drawn where the run is ("Queued: 2 runs ahead of yours · waiting 14 s") and updated as the queue moves,
  instead of a spinner that looks frozen; it disappears when the run starts.
* **Cancellation.** The run's :class:`~core.model.handle.CancelToken` is checked while queued, at every
  generated token and at every batch. Its check asks Streamlit whether this script run is still wanted
  (``get_run_yield_check``: Streamlit raises its own stop exception when the browser tab was closed — the
  server then stops the session's script — when the Stop button was pressed, or when a newer run of the same
  session replaced this one; and its rerun exception for a queued rerun). As second signals, a run whose
  session is no longer connected (``Runtime.is_active_session``) or that a newer page run of the same session
  has superseded (:class:`SessionRuns`, per session in ``st.session_state``) ends too. Either way the
  handle's ``with`` blocks release the model on the way out.
* **One run per visitor.** A session has one live script run; a newer run of the session (any click) ends the
  older one at its next token or batch, so one visitor never holds the model twice. Separate tabs are separate
  sessions and queue like anyone else.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import streamlit as st
from streamlit.runtime import Runtime
from streamlit.runtime.scriptrunner import StopException, get_script_run_ctx

from components import keys, state
from core.model.handle import CancelToken, install_run_control

REFRESH_S = 1.0
"""How often the queued notice's waiting time is redrawn."""


def queued_text(ahead: int, waited_s: float) -> str:
    """``"Queued: 2 runs ahead of yours · waiting 14 s …"``: what a waiting visitor reads."""
    runs = "1 run" if ahead == 1 else f"{ahead} runs"
    return (
        f"Queued: {runs} ahead of yours · waiting {waited_s:.0f} s. The model serves one run at a time, in the "
        "order they were started; yours starts by itself when they finish (closing this tab cancels it)."
    )


class _QueueNotice:
    """``on_wait(runs_ahead)`` for the handle: a notice drawn where the script is when the wait starts."""

    def __init__(self) -> None:
        self._slot: Any = None
        self._started = 0.0
        self._shown: tuple[int, int] | None = None

    def __call__(self, ahead: int) -> None:
        if ahead <= 0:
            if self._slot is not None:
                self._slot.empty()
            self._slot, self._shown = None, None
            return
        now = time.monotonic()
        if self._slot is None:
            self._slot, self._started = st.empty(), now
        waited = now - self._started
        shown = (ahead, int(waited // REFRESH_S))
        if shown != self._shown:  # redraw when the queue moves, and about once a second for the clock
            self._slot.info(queued_text(ahead, waited), icon=":material/hourglass_top:")
            self._shown = shown


class SessionRuns:
    """The run number of a session's latest page run (kept in its ``st.session_state``; thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latest = -1

    def start(self, run: int) -> None:
        """Record that page run ``run`` of this session started (older runs are superseded)."""
        with self._lock:
            self._latest = max(self._latest, run)

    def superseded(self, run: int) -> bool:
        with self._lock:
            return self._latest > run


def _still_wanted(runs: SessionRuns, run: int, session_id: str | None, yield_check: Callable[[], None] | None) -> bool:
    """The token's check: ``False`` while this page run should go on. When it should not, it raises
    Streamlit's own stop (or rerun) exception, which ends the script run quietly (no error box, no traceback in
    the log) and passes every ``except Exception`` on the way: Streamlit has ended the run (closed tab, Stop,
    a newer run with fast reruns), a newer run of the session started, or the session is no longer connected."""
    if yield_check is not None:
        yield_check()
    if runs.superseded(run):
        raise StopException()  # a newer run of this session started: this one's page is gone
    if session_id is not None and Runtime.exists() and not Runtime.instance().is_active_session(session_id):
        raise StopException()  # the tab was closed (or lost its connection)
    return False


def make_token(
    runs: SessionRuns, run: int, session_id: str | None = None, yield_check: Callable[[], None] | None = None
) -> CancelToken:
    """The cancel token of page run number ``run`` of a session (registered as its latest run)."""
    runs.start(run)
    return CancelToken(lambda: _still_wanted(runs, run, session_id, yield_check))


def watch() -> CancelToken:
    """Govern this page run's model calls: queued notice, cancellation when abandoned. Call once per run,
    before any model call (:func:`components.page.open_page` does)."""
    ctx = get_script_run_ctx(suppress_warning=True)
    runs = st.session_state.setdefault(keys.ACTIVE_RUN, SessionRuns())
    token = make_token(runs, state.run_number(), getattr(ctx, "session_id", None), getattr(ctx, "yield_check", None))
    install_run_control(token, _QueueNotice())
    return token
