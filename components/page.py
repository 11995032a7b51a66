"""The one prologue of every page: page config, the shared sidebar, the model handle and its facts.

The model never holds up a page's first paint: :func:`open_page` starts loading the sidebar's model in a
background thread (:data:`_load_handle`: one load per model and revision, shared by every session) and returns
at once; the page draws its title, intro and inputs, and only its first use of ``page.handle`` (or
``page.config``, which names the model that did load) waits, behind a visible "Loading the model … (≈ N s)"
notice that counts the seconds. A load that fails is not kept: the next page run tries again.

How a page starts::

    from components.page import open_page

    def main() -> None:
        page = open_page("Dual Path")          # set_page_config, sidebar, model (or a plain error and stop)
        draw_header()
        query, context = inputs.query_and_context()
        ... page.config.settings, page.handle ...

    main()

The inside-the-model views (Attention, Layer trajectories, Vocabulary lens) open on the session's last run,
which must come from the model the sidebar selects: :meth:`PageContext.last_result` does that check, and
:func:`components.internals_state.open_view` builds their prologue on it.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from components import keys, prologue, queue, state, url_state, widgets
from components.frame import page_title
from components.state import AppConfig
from components.text import escape_markdown, plain_message
from core.engine.result import DualPathResult
from core.io import atomic_write_json, cache_dir
from core.model.loading import EMBEDDED_MODEL, EMBEDDED_NAME, ModelHandle, ModelLoadError, load_model
from core.public import current_policy

logger = logging.getLogger(__name__)

POLL_S = 0.5
"""How often the loading notice is redrawn (each redraw also lets a rerun interrupt the wait)."""
MIN_REMEMBERED_S = 0.5
"""Loads faster than this are not remembered as the model's load time."""
LOAD_TIMES = "model_load_seconds.json"
"""The last measured load time of each model, in the user cache (the "≈ N s" of the loading notice)."""


class PageContext:
    """What every page starts from: the sidebar's selection and the model, loaded on first use.

    Attributes:
        selected: what the shared sidebar selected (available at once, before the model is loaded).
    """

    def __init__(
        self, config: AppConfig, handle: ModelHandle | None = None, notices: DeltaGenerator | None = None
    ) -> None:
        self.selected = config
        self._resolved: tuple[ModelHandle, AppConfig] | None = None if handle is None else (handle, config)
        # above the page's inputs: the loading notice, and the error of a model that cannot load
        self._notices = notices if notices is not None else st.container()

    def _resolve(self) -> tuple[ModelHandle, AppConfig]:
        if self._resolved is None:
            with self._notices:
                handle, config = _handle_or_fallback(self.selected)
            url_state.restore_result(config, handle)  # a reload: this server's run of the restored inputs, if any
            widgets.draw_model_facts(handle)
            from components import calibrate_view  # the calibration's libraries, once the model is there

            calibrate_view.sidebar_notice(handle)
            url_state.sync()
            self._resolved = (handle, config)
        return self._resolved

    @property
    def handle(self) -> ModelHandle:
        """The loaded model, shared by every session (the first use waits for the load, with a notice)."""
        return self._resolve()[0]

    @property
    def config(self) -> AppConfig:
        """What the sidebar selected, naming the model that did load (another one when the selected model
        failed to load: see :func:`open_page`). Waits for the load like :attr:`handle`."""
        return self._resolve()[1]

    @property
    def ready(self) -> bool:
        """Whether the model is loaded (then :attr:`handle` does not wait)."""
        return self._resolved is not None or _load_handle.is_loaded(self.selected.model_spec, self.selected.revision)

    def inputs(self) -> tuple[str, str]:
        """The shared (query, context), as last typed or picked on any page."""
        return state.current_inputs()

    def last_result(self, *, same_model: bool = True) -> DualPathResult | None:
        """The session's result for the current inputs and settings, else its most recent one.

        Args:
            same_model: when ``True`` (the default), a result made by another model than the one the sidebar
                now selects is not returned: a warning says so and the result is ``None``. Views that look
                inside the model need this (their analysis must come from the model that answered).
        """
        if not len(state.results()):  # no run in this session: nothing to wait for the model for
            return None
        query, context = self.inputs()
        result = state.select_result(self.config, query, context)
        if result is None or not same_model or result.model == self.handle.info.name:
            return result
        st.warning(
            f"The last run used {escape_markdown(result.model)}, but the sidebar now selects "
            f"{escape_markdown(self.handle.info.name)}. Run the example again on the Dual Path page to look "
            "inside this model."
        )
        return None


def open_page(title: str | None = None, *, early: prologue.Early | None = None) -> PageContext:
    """Start a page: ``st.set_page_config`` (wide), the shared sidebar, the model and its facts.

    Args:
        title: the page's name for the browser tab (``None`` on the landing page).
        early: what the page drew before it imported its libraries (:func:`components.prologue.begin`, which
            this calls when the page did not).

    Returns:
        The sidebar's selection and the model, whose load starts now in the background: the page's first use
        of ``handle`` or ``config`` waits for it (see :class:`PageContext`), so everything the page draws
        before that is on screen while the model loads. When the model cannot be loaded, the loader's message
        is shown as plain text (no server paths) where the page first needs it, and the page goes on with the
        model this session loaded last (else the embedded one), so its inputs stay where they were; ``config``
        then names that model. Only when no model loads at all does the page stop after the message.
    """
    st.set_page_config(page_title=page_title(title), layout="wide")
    early = early or prologue.begin()  # the run counted, a link's inputs restored (before any widget)
    queue.watch()  # this run's model calls: "queued: N runs ahead", cancelled when the tab closes
    config = widgets.sidebar()
    _start_loading(config)
    url_state.sync()
    page = PageContext(config, notices=early.notices)
    if page.ready:  # loaded already (every page run after the first load): the facts and a reload's run now
        page._resolve()
    return page


def _handle_or_fallback(config: AppConfig) -> tuple[ModelHandle, AppConfig]:
    """The selected model, else (with its error shown above the page's inputs) the one this session loaded
    last, else the embedded model; stops the page only when none loads."""
    wanted = (config.model_spec, config.revision)
    try:
        handle = _checked_handle(*wanted)
    except (ValueError, ModelLoadError) as exc:
        fallbacks = [f for f in (st.session_state.get(keys.LAST_MODEL), (EMBEDDED_MODEL, None)) if f and f != wanted]
        for spec, revision in dict.fromkeys(tuple(f) for f in fallbacks):
            try:
                handle = _checked_handle(spec, revision)
            except (ValueError, ModelLoadError):
                continue
            st.error(
                f"Could not load the model {escape_markdown(config.model_key)}. {plain_message(str(exc))} "
                f"The page keeps using {escape_markdown(handle.info.name)} until a model you pick loads.",
                icon=":material/error:",
            )
            return handle, dataclasses.replace(config, model_spec=spec, revision=revision)
        st.error("Could not load the model. " + plain_message(str(exc)))
        st.stop()
        raise  # unreachable: st.stop() raises; keeps type checkers satisfied
    st.session_state[keys.LAST_MODEL] = wanted
    return handle, config


def _start_loading(config: AppConfig) -> None:
    """Start loading the sidebar's model in the background (nothing when the public policy refuses it: the
    refusal is shown where the page first needs the model)."""
    try:
        spec, revision = current_policy().check_model(config.model_spec, config.revision)
    except ValueError:
        return
    _load_handle.start(spec, revision)


def _checked_handle(spec: str, revision: str | None) -> ModelHandle:
    """The shared handle of an allowed model (``ValueError`` for one the public policy refuses,
    :class:`ModelLoadError` for one that does not load), waiting for its load behind a notice."""
    spec, revision = current_policy().check_model(spec, revision)
    return _load_handle.wait(spec, revision)


def model_label(spec: str) -> str:
    """How the loading notice names a model."""
    return f"the embedded model {EMBEDDED_NAME}" if spec == EMBEDDED_MODEL else f"the model {spec}"


def _load_times_path() -> Path:
    return cache_dir() / LOAD_TIMES


def last_load_seconds(spec: str, revision: str | None) -> float | None:
    """The last measured load time of this model on this machine, if any."""
    try:
        value = json.loads(_load_times_path().read_text(encoding="utf-8")).get(f"{spec}@{revision or ''}")
    except (OSError, ValueError, AttributeError):
        return None
    return float(value) if isinstance(value, int | float) and value > 0 else None


def _remember_load_seconds(spec: str, revision: str | None, seconds: float) -> None:
    if seconds < MIN_REMEMBERED_S:  # a model that was in memory already (or a test's stub): no estimate
        return
    try:
        path = _load_times_path()
        try:
            times = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            times = {}
        times = times if isinstance(times, dict) else {}
        times[f"{spec}@{revision or ''}"] = round(seconds, 1)
        atomic_write_json(path, times)
    except OSError as exc:  # a read-only cache only costs the estimate
        logger.info("model load time not kept: %s", exc)


def loading_text(spec: str, revision: str | None, elapsed: float) -> str:
    """The notice shown while a page waits for its model: what is loaded, the estimate, the seconds so far."""
    last = last_load_seconds(spec, revision)
    estimate = (
        f"≈ {last:.0f} s, as the last load on this machine"
        if last is not None
        else "the first load on this machine; the embedded model is converted once"
        if spec == EMBEDDED_MODEL
        else "the first load on this machine"
    )
    return (
        f"Loading {escape_markdown(model_label(spec))} ({estimate}) · {elapsed:.0f} s so far. What the page shows "
        "works meanwhile; the page goes on by itself once the model is ready."
    )


class ModelLoads:
    """The app's model loads: one background load per (model, revision), shared by every session.

    :meth:`start` returns at once (the load runs on one worker thread, so two models never load at the same
    time); :meth:`wait` waits for it behind a notice that is redrawn every :data:`POLL_S` seconds (so a rerun
    can interrupt the wait; the load goes on). A load that failed is not kept: the next :meth:`start` tries
    again. Tests point the app at another model with ``monkeypatch.setattr(page, "load_model", ...)`` and
    :meth:`clear`.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loads: dict[tuple[str, str | None], Future[ModelHandle]] = {}
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ror-model-load")

    def start(self, spec: str, revision: str | None) -> Future[ModelHandle]:
        """The load of this model: the one under way or done, else a new one."""
        key = (spec, revision)
        with self._lock:
            load = self._loads.get(key)
            if load is None or (load.done() and load.exception() is not None):
                load = self._worker.submit(_timed_load, spec, revision)
                self._loads[key] = load
            return load

    def is_loaded(self, spec: str, revision: str | None) -> bool:
        with self._lock:
            load = self._loads.get((spec, revision))
        return load is not None and load.done() and load.exception() is None

    def wait(self, spec: str, revision: str | None) -> ModelHandle:
        """The loaded model, waiting behind a "Loading …" notice when it is not ready (raises what the load
        raised)."""
        load = self.start(spec, revision)
        if not load.done():
            notice, t0 = st.empty(), time.monotonic()
            while not load.done():
                notice.info(loading_text(spec, revision, time.monotonic() - t0), icon=":material/hourglass_top:")
                try:
                    load.result(timeout=POLL_S)
                except TimeoutError:
                    continue
                except Exception:  # noqa: BLE001 - re-raised below by result()
                    break
            notice.empty()
        return load.result()

    def __call__(self, spec: str, revision: str | None) -> ModelHandle:
        """The loaded model, waiting without a notice (outside a page)."""
        return self.start(spec, revision).result()

    def clear(self) -> None:
        """Forget every load (the next use loads again)."""
        with self._lock:
            self._loads.clear()


PRELOADED = ("core.detectors.catalog",)
"""Modules the pages import that take seconds (every detector family: scikit-learn, SciPy, captum), imported by
the loading thread once the model is loaded, so that the next page a visitor opens does not import them."""


def _timed_load(spec: str, revision: str | None) -> ModelHandle:
    t0 = time.perf_counter()
    handle = load_model(spec, revision=revision)  # the module's name, so tests can point it elsewhere
    _remember_load_seconds(spec, revision, time.perf_counter() - t0)
    for module in PRELOADED:
        try:
            importlib.import_module(module)
        except Exception:  # a page that needs it reports its own import error
            logger.exception("preloading %s failed", module)
    return handle


_load_handle = ModelLoads()
"""One :class:`ModelHandle` per (model, revision), shared by every session (errors are not kept)."""


def get_handle(spec: str, revision: str | None = None) -> ModelHandle:
    """The shared handle for a model; on failure shows the loader's message (plain text) and stops the page.

    In public mode a model outside the allow-list is refused before anything is loaded (:mod:`core.public`).
    """
    try:
        spec, revision = current_policy().check_model(spec, revision)
    except ValueError as exc:
        st.error("Could not load the model. " + plain_message(str(exc)))
        st.stop()
    try:
        return _load_handle.wait(spec, revision)
    except ModelLoadError as exc:
        st.error("Could not load the model. " + plain_message(str(exc)))
        st.stop()
        raise  # unreachable: st.stop() raises; keeps type checkers satisfied
