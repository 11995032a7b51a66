"""The one prologue of every page: page config, the shared sidebar, the model handle and its facts.

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
from dataclasses import dataclass

import streamlit as st

from components import inputs, keys, queue, state, url_state, widgets
from components.state import AppConfig
from components.text import escape_markdown, plain_message
from core.engine.result import DualPathResult
from core.model.loading import EMBEDDED_MODEL, ModelHandle, ModelLoadError, load_model
from core.public import current_policy

APP_TITLE = "Read or Recall"


@dataclass(frozen=True)
class PageContext:
    """What every page starts from.

    Attributes:
        config: what the shared sidebar selected (model, revision, run settings).
        handle: the loaded model, shared by every session.
    """

    config: AppConfig
    handle: ModelHandle

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


def page_title(title: str | None) -> str:
    """The browser tab's title: ``"<title> · Read or Recall"``, or the app's name alone."""
    return f"{title} · {APP_TITLE}" if title else APP_TITLE


def open_page(title: str | None = None) -> PageContext:
    """Start a page: ``st.set_page_config`` (wide), the shared sidebar, the model and its facts.

    Args:
        title: the page's name for the browser tab (``None`` on the landing page).

    Returns:
        The sidebar's selection and the loaded model. When the model cannot be loaded, the loader's message
        is shown as plain text (no server paths) at the top of the page, and the page goes on with the model
        this session loaded last (else the embedded one), so its inputs stay where they were; the returned
        ``config`` names that model. Only when no model loads at all does the page stop after the message.
    """
    _use_the_apps_navigation()
    st.set_page_config(page_title=page_title(title), layout="wide")
    inputs.use_app_style()
    state.begin_run()
    queue.watch()  # this run's model calls: "queued: N runs ahead", cancelled when the tab closes
    url_state.restore()  # a reload or a shared link: the last run's inputs and settings, before any widget
    config = widgets.sidebar()
    handle, config = _handle_or_fallback(config)
    url_state.restore_result(config, handle)  # a reload: this server's run of the restored inputs, if any
    widgets.draw_model_facts(handle)
    url_state.sync()
    return PageContext(config=config, handle=handle)


def _use_the_apps_navigation() -> None:
    """Make sure app.py's ``st.navigation`` names the pages (the landing page "Start", not "app").

    Streamlit decides once per server process whether the ``pages/`` folder is an old-style page list: it is
    while no run has called ``st.navigation`` yet. When the first run after a start is a view's URL
    (``/Dual_Path``), Streamlit runs that view directly, app.py's navigation is skipped and the sidebar lists
    the folder's file names. This turns the old style off and reruns, through app.py, on the same page. It
    does nothing under app.py's own navigation, or when the app's main script is not app.py (a test that
    opens one page's script).
    """
    from streamlit.runtime import Runtime
    from streamlit.runtime.pages_manager import PagesManager  # Streamlit's own switch; no public equivalent
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    ctx = get_script_run_ctx()
    main = getattr(getattr(ctx, "pages_manager", None), "main_script_path", "") or ""
    # only under a real server: AppTest re-decides the folder's style at every run (its runtime is a mock)
    served = Runtime.exists() and type(Runtime.instance()) is Runtime
    if served and PagesManager.uses_pages_directory and str(main).endswith("app.py"):
        PagesManager.uses_pages_directory = False
        st.rerun()


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


def _checked_handle(spec: str, revision: str | None) -> ModelHandle:
    """The shared handle of an allowed model (``ValueError`` for one the public policy refuses,
    :class:`ModelLoadError` for one that does not load)."""
    spec, revision = current_policy().check_model(spec, revision)
    return _load_handle(spec, revision)


@st.cache_resource(show_spinner="Loading the model (the first load of the embedded model converts it once)…")
def _load_handle(spec: str, revision: str | None) -> ModelHandle:
    """One :class:`ModelHandle` per (model, revision), shared by every session (errors are not cached).

    Tests point the app at another model with ``monkeypatch.setattr(page, "load_model", ...)`` and
    ``page._load_handle.clear()``.
    """
    return load_model(spec, revision=revision)


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
        return _load_handle(spec, revision)
    except ModelLoadError as exc:
        st.error("Could not load the model. " + plain_message(str(exc)))
        st.stop()
        raise  # unreachable: st.stop() raises; keeps type checkers satisfied
