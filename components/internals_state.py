"""Page-side state of the three internals views (Attention, Layer trajectories, Vocabulary lens).

The views open (:func:`open_view`) on the session's last dual-path run, as
:meth:`components.page.PageContext.last_result` picks it, and need one instrumented forward per path
(:func:`core.methods.internals.analyze`). That analysis is computed once per result — with a progress bar —
and kept in this browser session, so switching between the three pages or re-rendering never runs the model
again. The one attention head a user opens (one more forward pass) and the vocabulary back-projections are
cached the same way. CRM bases come from :func:`core.methods.crm.load_basis` (bundled for the embedded model,
else the disk cache) or are computed here with a progress bar.

Session caches (:func:`components.lru.session_lru`): analyses, head patterns and projections.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import streamlit as st

from components import keys, prefetch
from components.lru import SessionLRU, session_lru
from components.page import open_page
from components.panels import draw_run_context
from components.run import bar_progress, run_cached, run_guarded
from components.text import plain_message
from core.engine.estimate import describe_estimate, estimate
from core.engine.result import DualPathResult, result_digest
from core.methods.crm import CrmBasis, compute_basis, load_basis, unit_directions, vocabulary_projection
from core.methods.internals import LENS_TOP_K, Internals, analyze, attention_pattern, path_sequence
from core.model.handle import ModelHandle
from core.model.progress import Progress

MAX_ANALYSES = 6
"""Analyses kept per browser session (each holds 2 × (L + 1) × answer-length × hidden floats, ~5 MB for the
embedded model at 64 answer tokens)."""
MAX_PATTERNS = 12
MAX_PROJECTIONS = 8
DUAL_PATH_PAGE = "pages/1_Dual_Path.py"


# ----------------------------------------------------------------------------------------------------------
# Which result the views show


def open_view(title: str) -> tuple[ModelHandle, DualPathResult, Internals] | None:
    """The start of every inside-the-model page (after its header, :func:`components.frame.first_paint`): the
    page prologue, the session's last run and its analysis.

    Args:
        title: the page's name for the browser tab (see :func:`components.page.open_page`).

    Returns:
        ``(handle, result, internals)``, or ``None`` once the page has said why there is nothing to show yet
        (no run in this session, a run made by another model than the sidebar's, or a failed analysis).
    """
    page = open_page(title)
    result = page.last_result()  # None (after a warning) when another model made it
    if result is None:
        draw_no_result()
        return None
    draw_run_context(result)
    internals = internals_for(page.handle, result)
    return None if internals is None else (page.handle, result, internals)


def run_view(title: str, draw: Callable[[ModelHandle, DualPathResult, Internals], None]) -> None:
    """An inside-the-model page after its header: :func:`open_view`, then ``draw(handle, result, internals)``
    when there is something to show."""
    opened = open_view(title)
    if opened is not None:
        draw(*opened)


def draw_no_result() -> None:
    """What a view shows before any run: where to start."""
    st.info("No run yet in this session. Run an example on the Dual Path page; this view then opens on it.")
    st.page_link(DUAL_PATH_PAGE, label="Go to the Dual Path page", icon=":material/compare_arrows:")


# ----------------------------------------------------------------------------------------------------------
# The analysis of a result


def cached_internals(result: DualPathResult) -> Internals | None:
    """The analysis of ``result`` if this session already has it (never runs the model)."""
    return session_lru(keys.INTERNALS_ANALYSES, MAX_ANALYSES).get(result_digest(result))


def compute_internals(handle: ModelHandle, result: DualPathResult, progress: Progress | None = None) -> Internals:
    """The analysis of ``result`` as the views show it (also what :mod:`components.prefetch` computes)."""
    return analyze(handle, result, top_k=LENS_TOP_K, progress=progress)


def internals_for(handle: ModelHandle, result: DualPathResult) -> Internals | None:
    """The analysis of ``result``: from this session's cache, else prepared after the run
    (:mod:`components.prefetch`), else computed now with a progress bar.

    Returns ``None`` (after an error box) when the analysis fails, e.g. for a model without eager attention.
    """
    cache, digest = session_lru(keys.INTERNALS_ANALYSES, MAX_ANALYSES), result_digest(result)
    if digest not in cache:
        prefetched = prefetch.take(prefetch.INTERNALS, digest)
        if prefetched is not None:
            cache.put(digest, prefetched)
    return run_cached(
        cache,
        digest,
        lambda progress: compute_internals(handle, result, progress),
        start="Looking inside the model: one instrumented forward pass per path…",
        describe=lambda done, total, label: f"{label} ({done}/{total})",
        what="analysis",
        log="internals analysis failed",
    )


def head_pattern(
    handle: ModelHandle, result: DualPathResult, path: str, layer: int, head: int
) -> tuple[np.ndarray, list[str], int]:
    """One head's full ``(T, T)`` attention pattern on one path, its tokens and the prompt length (cached)."""

    def compute() -> tuple[np.ndarray, list[str], int]:
        with st.spinner(f"One forward pass for layer {layer}, head {head}…"):
            ids, tokens, prompt_len = path_sequence(handle, result, path)
            return attention_pattern(handle, ids, layer, head), tokens, prompt_len

    key = f"{result_digest(result)}|{path}|{layer}|{head}"
    return session_lru(keys.INTERNALS_PATTERNS, MAX_PATTERNS).get_or_put(key, compute)


# ----------------------------------------------------------------------------------------------------------
# CRM basis and vocabulary projections


def basis_for(handle: ModelHandle, template: str) -> CrmBasis | None:
    """The stored CRM basis of this model and template (bundled or on disk), or ``None``."""
    try:
        return load_basis(handle, template)
    except ValueError as exc:
        st.error(plain_message(str(exc)))
        return None


def draw_compute_basis(handle: ModelHandle, template: str, *, key: str) -> CrmBasis | None:
    """Explain that no basis exists and offer to compute it (two forward passes per calibration prompt)."""
    st.info(
        f"No CRM calibration exists yet for {handle.info.name} with template {template!r}. Computing it runs two "
        "forward passes for each of the 120 bundled calibration prompts, then fits the directions and the "
        "classifier; the result is cached on disk for this model."
    )
    clicked = st.button("Compute the CRM calibration", key=key, icon=":material/calculate:")
    st.caption(f"240 forward passes: {describe_estimate(estimate(handle, forwards=240))}.")
    if not clicked:
        return None
    bar = st.progress(0.0, text="Calibration prompts…")
    progress = bar_progress(
        bar, lambda done, total, _: f"Calibration prompts: {done}/{total} (then the classifier's cross-validation)"
    )
    basis = run_guarded(
        lambda: compute_basis(handle, progress=progress, template=template),
        what="calibration",
        log="CRM calibration failed",
    )
    bar.empty()
    if basis is None:
        return None
    st.success("Calibration computed and cached for this model.")
    return basis


def _projections() -> SessionLRU[dict[str, Any]]:
    """The session's vocabulary back-projections (of basis directions and of runs' displacements)."""
    return session_lru(keys.INTERNALS_PROJECTIONS, MAX_PROJECTIONS)


def projection_for(handle: ModelHandle, basis: CrmBasis, direction: str, k: int) -> dict[str, Any]:
    """Vocabulary back-projection of a basis direction (cached per model, template, direction and k)."""
    key = f"{basis.model}|{basis.template}|{basis.meta.get('prompt_set_sha256')}|{direction}|{k}"
    return _projections().get_or_put(key, lambda: vocabulary_projection(handle, basis.direction(direction), k))


def run_projection_for(handle: ModelHandle, internals: Internals, result: DualPathResult, k: int) -> dict[str, Any]:
    """Back-projection of this run's own displacement d_ℓ (normalized per layer) at the last prompt token."""

    def compute() -> dict[str, Any]:
        return vocabulary_projection(handle, unit_directions(internals.displacement[:, 0]), k)

    return _projections().get_or_put(f"run|{result_digest(result)}|{k}", compute)
