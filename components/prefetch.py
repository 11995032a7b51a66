"""A run's views, prepared in the background: a view's first visit after a run draws a stored value.

What Attention, Layer trajectories and Vocabulary lens (the internals analysis: one instrumented forward per
path), Ablations (the clean per-layer trajectory: two prompt forwards) and RADAR (one forward over the query)
need from a Dual Path run is computed once, right after the Dual Path page has drawn the result, on one worker
thread shared by every session:

* :func:`after_run` (the Dual Path page's last call) submits the session's tasks, skipping what the session
  already holds. The worker runs one task at a time; each waits until no visitor's run holds or waits for the
  model, and every model call goes through the handle (its lock; hooks removed in ``finally``), so a task
  never slows the headline of a run and never interleaves with one.
* :func:`take` (a view, before computing the same value) returns a finished task's value, waits for a running
  one (a spinner says so), and takes over a task that has not started (the view then computes it itself, as
  without a prefetch).
* **Per session.** The tasks live in this session's ``st.session_state`` (:class:`Prefetched`), keyed by the
  task's name and the result's digest; the worker writes only into that object. A newer run of the session
  replaces the older run's tasks (a running one ends at its next model call), and a closed tab ends them.
* **The same values.** A task calls the function the view calls with the same arguments (the view's own
  ``compute_*``); a failed or cancelled task leaves nothing, and the view computes the value as before.

Under ``streamlit run`` the prefetch is on; under AppTest it is off unless ``READ_OR_RECALL_PREFETCH=1`` (a
test's model calls stay its own); ``READ_OR_RECALL_PREFETCH=0`` turns it off on a server.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TYPE_CHECKING, Any

import streamlit as st

if TYPE_CHECKING:
    from core.engine.result import DualPathResult
    from core.model.handle import CancelToken, ModelHandle

logger = logging.getLogger(__name__)

SESSION_KEY = "ror.prefetch"
"""Where a session's :class:`Prefetched` lives in ``st.session_state``."""
ENV = "READ_OR_RECALL_PREFETCH"
INTERNALS, TRAJECTORY, RADAR = "internals", "trajectory", "radar"
"""The tasks: the internals analysis, the Ablations clean trajectory, RADAR's analysis of the query."""
LABELS = {
    INTERNALS: "The instrumented forward of both paths",
    TRAJECTORY: "The clean per-layer trajectory",
    RADAR: "RADAR's forward pass over the prompt",
}
POLL_S = 0.25
"""How often a waiting task looks whether the model is free, and a waiting view whether its task is done."""
MAX_STARTED = 64
"""Tasks a session remembers having started (a Dual Path rerun of the same result does not start them again)."""

_worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ror-prefetch")

Key = tuple[str, str]
"""``(task name, key)``: the key is the result's digest (RADAR: the analyzed text's key, :func:`radar_key`)."""


def enabled() -> bool:
    """Whether runs are prefetched: under a real server, unless ``READ_OR_RECALL_PREFETCH`` says otherwise."""
    flag = os.environ.get(ENV)
    if flag is not None:
        return flag.strip().lower() not in ("", "0", "false", "no", "off")
    return _served()


def _served() -> bool:
    from streamlit.runtime import Runtime

    return Runtime.exists() and type(Runtime.instance()) is Runtime  # AppTest's runtime is a mock


class _Task:
    """One submitted task: its future, and whether it has started computing (it holds or uses the model)."""

    def __init__(self) -> None:
        self.future: Future[Any] = Future()
        self.computing = threading.Event()


class Prefetched:
    """One session's background tasks, keyed by :data:`Key` (thread-safe).

    Args:
        still_wanted: polled by a running task before each model call; ``False`` ends it (a closed tab).
    """

    def __init__(self, still_wanted: Callable[[], bool] = lambda: True) -> None:
        self._lock = threading.Lock()
        self._tasks: dict[Key, _Task] = {}
        self._started: OrderedDict[Key, None] = OrderedDict()  # every task submitted lately (not again)
        self._still_wanted = still_wanted

    def start(self, handle: ModelHandle, tasks: dict[Key, Callable[[], Any]]) -> None:
        """Submit ``tasks`` to the shared worker; a task already under way or done is kept, the session's other
        tasks (an older run's) are dropped: one not started is cancelled, a running one ends at its next model
        call."""
        with self._lock:  # held until each task is registered: a task's token reads the registry
            for key in [k for k in self._tasks if k not in tasks]:
                self._tasks.pop(key).future.cancel()
            for key, compute in tasks.items():
                if key not in self._tasks and key not in self._started:  # once per run: a view took it
                    task = _Task()
                    task.future = _worker.submit(_run, handle, self._token(key, task), task.computing, compute)
                    self._tasks[key] = task
                    self._started[key] = None
                    while len(self._started) > MAX_STARTED:
                        self._started.popitem(last=False)

    def _token(self, key: Key, task: _Task) -> CancelToken:
        from core.model.handle import CancelToken

        def dropped() -> bool:
            with self._lock:
                return self._tasks.get(key) is not task or not self._still_wanted()

        return CancelToken(dropped)

    def _task(self, key: Key) -> _Task | None:
        with self._lock:
            return self._tasks.get(key)

    def future(self, key: Key) -> Future[Any] | None:
        """The task's future, or ``None``."""
        task = self._task(key)
        return None if task is None else task.future

    def computing(self, key: Key) -> bool:
        """Whether the task has the model (it no longer waits for a visitor's run to end)."""
        task = self._task(key)
        return task is not None and task.computing.is_set()

    def drop(self, key: Key) -> None:
        with self._lock:
            task = self._tasks.pop(key, None)
        if task is not None:
            task.future.cancel()

    def tasks(self) -> list[Key]:
        """The keys of the session's tasks (running, waiting or done, not yet taken)."""
        with self._lock:
            return list(self._tasks)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until every task is done (for tests and benchmarks); ``True`` when they all are."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for key in self.tasks():
            future = self.future(key)
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if future is None:
                continue
            try:
                future.exception(timeout=remaining)
            except FutureTimeout:
                return False
            except CancelledError:
                continue
        return True

    def cancel(self) -> None:
        """Drop every task (a running one ends at its next model call)."""
        with self._lock:
            tasks, self._tasks = list(self._tasks.values()), {}
        for task in tasks:
            task.future.cancel()


def _run(handle: ModelHandle, token: CancelToken, computing: threading.Event, compute: Callable[[], Any]) -> Any:
    """One task on the worker: after the visitors' runs, under the task's cancel token."""
    from core.model.handle import run_control

    with run_control(token):
        while handle.is_busy() or handle.waiting():  # a visitor's run goes first
            token.raise_if_cancelled()
            time.sleep(POLL_S)
        token.raise_if_cancelled()
        computing.set()
        return compute()


def session_store() -> Prefetched:
    """This session's :class:`Prefetched` (made on first use)."""
    store = st.session_state.get(SESSION_KEY)
    if not isinstance(store, Prefetched):
        store = Prefetched(_session_still_connected())
        st.session_state[SESSION_KEY] = store
    return store


def _session_still_connected() -> Callable[[], bool]:
    from streamlit.runtime import Runtime
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx(suppress_warning=True)
    session_id = getattr(ctx, "session_id", None)
    if session_id is None or not _served():
        return lambda: True
    return lambda: Runtime.instance().is_active_session(session_id)


def radar_key(handle: ModelHandle, text: str, table_digest: str) -> str:
    """The key of RADAR's analysis of ``text`` with the feature table of digest ``table_digest``."""
    return f"{handle.info.name}|{table_digest}|{text}"


def tasks_for(handle: ModelHandle, result: DualPathResult) -> dict[Key, Callable[[], Any]]:
    """The tasks of a run that this session does not hold yet: each calls the function its view calls."""
    from components import internals_state
    from core.engine.result import result_digest
    from core.methods import ablation, radar

    digest = result_digest(result)
    tasks: dict[Key, Callable[[], Any]] = {}
    if internals_state.cached_internals(result) is None:
        tasks[(INTERNALS, digest)] = lambda: internals_state.compute_internals(handle, result)
    tasks[(TRAJECTORY, digest)] = lambda: ablation.layer_trajectory(handle, result)
    table = radar.cached_feature_table(handle)
    text = radar.radar_prompt(result.query)  # the page's default source: the query alone
    if text:
        digest_of_table = "none" if table is None else radar.table_digest(table)
        tasks[(RADAR, radar_key(handle, text, digest_of_table))] = lambda: radar.analyze_with_table(handle, text, table)
    return tasks


def after_run(handle: ModelHandle, result: DualPathResult) -> None:
    """Start preparing ``result``'s views in the background (the Dual Path page calls this after drawing it)."""
    if not enabled():
        return
    try:
        session_store().start(handle, tasks_for(handle, result))
    except Exception:  # the views compute it themselves
        logger.exception("prefetching the views of a run failed to start")


def take(name: str, key: str) -> Any | None:
    """The value of this session's task ``(name, key)``: at once when it is done, after a wait (a spinner names
    it) while it runs; ``None`` when there is none, it failed, or it had not started (it is then dropped and the
    view computes the value itself)."""
    store = st.session_state.get(SESSION_KEY)
    future = store.future((name, key)) if isinstance(store, Prefetched) else None
    if future is None:
        return None
    if not future.done() and not store.computing((name, key)):  # not started, or waiting for the model
        store.drop((name, key))  # cancelled; a task waiting for the model ends at its next look
        return None
    if not future.done():  # computing: its model call is under way
        from core.model.handle import check_cancelled

        with st.spinner(f"{LABELS.get(name, name)}: finishing what was started after the run…"):
            while not future.done():
                check_cancelled()  # a click reruns the page at once (the task goes on)
                try:
                    future.exception(timeout=POLL_S)
                except FutureTimeout:
                    continue
    store.drop((name, key))
    if future.cancelled():
        return None
    error = future.exception()
    if error is not None:
        logger.info("a prefetched %s was not used: %s", name, error)
        return None
    return future.result()
