"""One way for a page to run the model: key → cache → progress → error box → store.

Every page that runs something long (the dual path, an internals analysis, Self-Critique, SMA, a context
ablation) follows the same rule, written once here:

* :func:`run_guarded` runs it and turns a failure into an error box: a ``ValueError`` (bad input: the engine's
  message says what to change) shows its message; anything else shows "The run failed (TypeError). Details are
  in the server log." and logs the traceback there. It returns ``None`` after the box, so the page goes on.
* :func:`run_cached` adds the cache around it: the value stored under ``key`` in a
  :func:`~components.lru.session_lru`, else a progress bar driven by a :class:`~core.model.progress.Progress`,
  the guarded run, and the value stored under ``key``.
* :func:`bar_progress` is the :class:`~core.model.progress.Progress` of a Streamlit progress bar.

Example::

    internals = run_cached(
        session_lru(keys.INTERNALS_ANALYSES, 6),
        result_digest(result),
        lambda progress: analyze(handle, result, progress=progress),
        start="Looking inside the model…",
        describe=lambda done, total, text: f"{text} ({done}/{total})",
        what="analysis",
        log="internals analysis failed",
    )
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

import streamlit as st

from components.lru import SessionLRU
from components.text import plain_message
from core.model.progress import Progress

logger = logging.getLogger(__name__)

T = TypeVar("T")

Describe = Callable[[int, int, str], str]
"""The bar's text after a report: ``describe(done, total, text)``."""


def failure_message(exc: Exception, what: str = "run") -> str:
    """The error box's text for ``exc``: a ``ValueError``'s own message (paths redacted, markdown escaped), else
    ``"The <what> failed (<type>). Details are in the server log."`` (no server detail reaches the page)."""
    if isinstance(exc, ValueError):
        return plain_message(str(exc))
    return f"The {what} failed ({type(exc).__name__}). Details are in the server log."


def run_guarded(
    compute: Callable[[], T],
    *,
    what: str = "run",
    log: str = "run failed",
    on_failure: Callable[[Exception], None] | None = None,
) -> T | None:
    """``compute()``, or ``None`` after an error box (see :func:`failure_message`).

    Args:
        compute: the run (it draws its own progress, if any).
        what: the noun of the box for an unexpected failure ("run", "analysis").
        log: the server-log line for an unexpected failure (the traceback follows it).
        on_failure: called with the exception before the box is drawn (e.g. clear a bar, mark a status box).
    """
    try:
        return compute()
    except Exception as exc:  # keep the page alive; an unexpected failure's details go to the log
        if not isinstance(exc, ValueError):
            logger.exception(log)
        if on_failure is not None:
            on_failure(exc)
        st.error(failure_message(exc, what))
        return None


def bar_progress(bar: Any, describe: Describe) -> Progress:
    """The :class:`~core.model.progress.Progress` that moves ``bar`` (``st.progress``) to ``done / total`` with
    the text ``describe(done, total, text)``."""

    def progress(done: int, total: int, text: str = "") -> None:
        bar.progress(min(1.0, done / max(total, 1)), text=describe(done, total, text))

    return progress


def run_cached(
    cache: SessionLRU[T],
    key: Hashable,
    compute: Callable[[Progress], T],
    *,
    start: str,
    describe: Describe,
    what: str = "run",
    log: str = "run failed",
) -> T | None:
    """The value stored under ``key``, else ``compute(progress)`` under a progress bar, stored under ``key``.

    Args:
        cache: the page's session cache.
        key: everything that changes the value (e.g. :func:`core.engine.result.result_digest`).
        compute: the run; it reports through the :class:`~core.model.progress.Progress` it is given.
        start: the bar's text before the first report.
        describe: the bar's text after each report.
        what, log: as in :func:`run_guarded`.

    Returns:
        The value, or ``None`` after an error box (nothing is stored then, so the next run tries again).
    """
    found = cache.get(key)
    if found is not None:
        return found
    bar = st.progress(0.0, text=start)
    value = run_guarded(lambda: compute(bar_progress(bar, describe)), what=what, log=log)
    bar.empty()
    return None if value is None else cache.put(key, value)
