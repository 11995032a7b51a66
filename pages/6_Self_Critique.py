"""Self-Critique: can the model leave its first answer's path when asked for a different one?

The page reads top to bottom like the UI: inputs and the Self-Critique controls, the two answers (streamed
while running), the score with its two factors, both entropy sequences one above the other, the score for
every K, and the export. Runs are kept in this session (a :func:`~components.lru.session_lru`): the same
inputs and settings show the stored run, and changing K only re-scores it. All maths lives in
:mod:`core.methods.selfcritique`; all figures in :mod:`figures.detectors`.
"""

from __future__ import annotations

from components import frame

frame.first_paint(
    "Self-Critique",
    plain="Ask the model for a different answer than the one it just gave: a model that recalls a memorized answer "
    "tends to repeat the same path with the same confidence, step by step.",
    precise="The model answers (r₁), then is shown its own answer and asked for a different solution (r₂). E₁ and "
    "E₂ are the per-token entropy profiles of the two answers. Score S = cos(zero-padded E₁, E₂) × "
    "min(|E₁|, |E₂|) / max(|E₁|, |E₂|); a high S means the two profiles line up, which the paper reads as "
    "likely contamination.",
    citation="Self-Critique: Tao et al. (2025), arXiv:2510.09259.",
)  # on screen while the imports below run

from components import prologue

early = prologue.begin(with_inputs=True)  # the example picker, the query and the context: light modules only

import json
import time
from typing import Any

import streamlit as st

from components import controls, keys, state, widgets
from components.lru import SessionLRU, session_lru
from components.page import PageContext, open_page
from components.progress import estimate_text
from components.run import run_guarded
from components.state import AppConfig
from components.stored_runs import run_or_show, start_hint
from components.text import escape_markdown, plain_message
from core.engine import StreamEvent
from core.engine.cost_meter import Work
from core.engine.estimate import observe_run
from core.methods.selfcritique import (
    CRITIQUE,
    DEFAULT_INSTRUCTION,
    DEFAULT_K,
    FIRST,
    K_CHOICES,
    RESPONSE_SLOT,
    SelfCritiqueResult,
    SelfCritiqueSettings,
    run_self_critique,
)
from core.methods.work import SELFCRITIQUE, observe_fills, selfcritique_done, selfcritique_planned
from core.model.handle import ModelHandle
from figures import detectors as figs

MAX_RESULTS = 12
"""Self-Critique runs kept per browser session (as plain dicts, :meth:`SelfCritiqueResult.to_dict`)."""
K_OPTIONS = [str(k) if k is not None else "full" for k in K_CHOICES]
PATH_LABELS = {
    "without": "Without the context (parametric path, as in the paper)",
    "with": "With the context (retrieval path)",
}

CAVEAT = (
    "A high score says the model could not leave its first answer's path when explicitly asked for a different "
    "one — the paper's sign of policy collapse on contaminated (memorized) problems. It was designed for "
    "reasoning tasks after RL post-training; with short factual answers and a small model the signal is weak, "
    "it ranks prompts rather than certifying one, and it says nothing about which source the answer came from."
)


def reset_instruction() -> None:
    """Callback: put the paper's critique instruction back."""
    state.set_stored(keys.SC_INSTRUCTION, DEFAULT_INSTRUCTION)


def work_of(config: AppConfig, handle: ModelHandle, query: str, context: str, settings: SelfCritiqueSettings) -> Work:
    """A run's units of work before it runs (:func:`core.methods.work.selfcritique_planned`): r₁ as long as this
    session's Dual Path answer on the same path and inputs when there is one (greedy, the same prompt), else a
    share of its budget; r₂ as long as the last critique answers' share of theirs."""
    found = state.cached_result(config, query, context)
    path = None if found is None else (found.retrieval if settings.use_context else found.parametric)
    steps = len(getattr(path, "token_ids", ()) or ()) or None
    return selfcritique_planned(handle, query, context, settings, steps)


def run_estimate(handle: ModelHandle, settings: SelfCritiqueSettings, work: Work) -> str:
    """The line under the button: the unit costs for the run's work × the ratio the last runs of this page took
    (else the unit costs alone)."""
    return estimate_text(handle, SELFCRITIQUE, work)


def draw_controls(
    config: AppConfig, handle: ModelHandle, query: str, context: str
) -> tuple[SelfCritiqueSettings, bool, Any]:
    """Path, K, instruction and the Run button with its time estimate; returns (settings, run clicked, the
    estimate's line, redrawn after a run)."""
    left, right = st.columns([1, 1], gap="medium")
    with left:
        path = controls.choice(st.radio, "Answer", keys.SC_PATH, PATH_LABELS)
        k_text = controls.choice(
            st.select_slider,
            "Top-K of the entropy",
            keys.SC_TOP_K,
            K_OPTIONS,
            str(DEFAULT_K),
            help="Entropy of the K most likely next tokens renormalized to one (the paper's approximation for "
            "APIs that return only the top-K log-probabilities); 'full' is the exact entropy over the whole "
            "vocabulary. Changing K re-scores instantly: no new generation.",
        )
    with right:
        instruction = state.persistent(
            st.text_area,
            "Critique instruction (appended to the query)",
            keys.SC_INSTRUCTION,
            DEFAULT_INSTRUCTION,
            height=150,
            help=f"The paper's instruction, verbatim from the authors' code. {RESPONSE_SLOT} is replaced by r₁.",
        )
        st.button("Restore the paper's instruction", key=keys.SC_RESET, on_click=reset_instruction)
    k = None if k_text == "full" else int(k_text)
    settings = SelfCritiqueSettings(
        max_new_tokens=config.settings.max_new_tokens,
        top_k=k,
        use_context=(path == "with"),
        template=config.settings.template,
        instruction=str(instruction),
    )
    st.caption(
        f"r₁ gets up to {settings.max_new_tokens} tokens (sidebar) and r₂ up to {settings.critique_tokens} "
        "(twice as many, as in the authors' code); both are greedy."
    )
    clicked = st.button("Run Self-Critique", type="primary", key=keys.SC_RUN, icon=":material/play_arrow:")
    line = st.empty()
    line.caption(run_estimate(handle, settings, work_of(config, handle, query, context, settings)))
    return settings, clicked, line


def result_key(config: AppConfig, query: str, context: str, settings: SelfCritiqueSettings) -> str:
    """Cache key: everything that changes the generations (K does not: it only re-scores)."""
    return json.dumps(
        [
            config.model_spec,
            config.revision,
            query.strip(),
            context.strip() if settings.use_context else "",
            settings.use_context,
            settings.template,
            settings.instruction,
            settings.max_new_tokens,
            settings.critique_tokens,
        ],
        ensure_ascii=False,
    )


def stored_runs() -> SessionLRU[dict[str, Any]]:
    """The session's runs by :func:`result_key` (plain dicts); the current one is the run shown last."""
    return session_lru(keys.SC_RESULTS, MAX_RESULTS, current=keys.SC_LAST)


def run_live(
    handle: ModelHandle, query: str, context: str, settings: SelfCritiqueSettings
) -> SelfCritiqueResult | None:
    """Generate r₁ then r₂, each streamed into its own box with a progress bar."""
    left, right = st.columns(2, gap="medium")
    slots = {}
    for path, column, title, limit in (
        (FIRST, left, "First answer r₁", settings.max_new_tokens),
        (CRITIQUE, right, "Critique answer r₂", settings.critique_tokens),
    ):
        with column:
            st.subheader(title)
            box = st.empty()
            widgets.show_answer(box, "")
            bar = st.progress(0.0, text="Waiting…")
            slots[path] = (box, bar, limit)

    def on_event(event: StreamEvent) -> None:
        if event.path not in slots:
            return
        box, bar, limit = slots[event.path]
        widgets.show_answer(box, event.text)
        bar.progress(
            1.0 if event.done else min(1.0, event.n_tokens / max(1, limit)),
            text=f"{event.n_tokens} / {limit} tokens" + (" · done" if event.done else ""),
        )

    def run() -> SelfCritiqueResult:
        with st.spinner("Generating r₁, then the critique answer r₂…"):
            return run_self_critique(handle, query, context, settings, on_event=on_event)

    result = run_guarded(run, log="self-critique run failed")
    if result is None:
        return None
    for path, text in ((FIRST, result.first_answer), (CRITIQUE, result.critique_answer)):
        widgets.show_answer(slots[path][0], text)
    return result


def draw_answers(result: SelfCritiqueResult) -> None:
    """The two stored answers side by side, with their lengths and how they ended."""
    left, right = st.columns(2, gap="medium")
    with left:
        st.subheader("First answer r₁")
        widgets.show_answer(st, result.first_answer)
        st.caption(f"{len(result.first_ids)} tokens · {result.first_finish}")
    with right:
        st.subheader("Critique answer r₂")
        widgets.show_answer(st, result.critique_answer)
        st.caption(f"{len(result.critique_ids)} tokens · {result.critique_finish}")


def draw_score(result: SelfCritiqueResult, k: int | None) -> None:
    """S and its two factors for this K, and what S can and cannot say."""
    st.subheader("Score")
    parts = figs.score_parts(result, k)
    c1, c2, c3 = st.columns(3)
    c1.metric("S (high ⇒ contaminated)", f"{parts['score']:.4f}", help="S = cosine × length ratio, in [0, 1].")
    c2.metric("cos(zero-padded E₁, E₂)", f"{parts['cosine']:.4f}")
    c3.metric(
        "length ratio min/max",
        f"{parts['length_ratio']:.3f}",
        help=f"|E₁| = {len(result.first_ids)}, |E₂| = {len(result.critique_ids)} generated tokens.",
    )
    st.caption(
        "S near 1: the critique answer repeats the first answer's uncertainty profile token for token (and its "
        "length) — the model did not find another path. S near 0: a different answer, or one of very different "
        "length. No threshold is given by the paper; compare prompts, or calibrate on labeled data "
        "(`python -m core evaluate --detectors selfcritique`)."
    )
    st.caption(CAVEAT)


def draw_entropies(result: SelfCritiqueResult, k: int | None, tag: str) -> None:
    """E₁ and E₂ one above the other, and the score for every K."""
    st.subheader("Token entropies of the two answers")
    e1, e2 = result.entropies(k)
    st.plotly_chart(
        figs.entropy_sequences_figure(result.first_tokens, e1, result.critique_tokens, e2, k=k),
        key=keys.scoped(keys.SC_ENTROPY, tag, k),
    )
    with st.expander("The score for every K"):
        st.dataframe(figs.k_sweep_frame(result), hide_index=True)
        st.caption(
            "The top-K approximation converges to the full-vocabulary entropy as K grows; the paper "
            "reports near-identical AUC from K = 3 to 50."
        )


def draw_export(result: SelfCritiqueResult, k: int | None) -> None:
    """Downloads (JSON run, CSV entropies), the exact prompts and the run's model and time."""
    st.subheader("Export")
    c1, c2 = st.columns(2)
    data = json.dumps(result.to_dict(), ensure_ascii=False, indent=2)
    widgets.download(c1, "Download the run (JSON)", data, "self_critique.json", key=keys.SC_JSON)
    csv = figs.entropy_frame(result, k).to_csv(index=False)
    widgets.download(c2, "Download the entropy sequences (CSV)", csv, "self_critique_entropies.csv", key=keys.SC_CSV)
    with st.expander("The exact prompts"):
        st.caption(f"First prompt ({result.first_prompt_len} tokens)")
        st.code(result.first_prompt, language=None, wrap_lines=True)
        st.caption(f"Critique prompt ({result.critique_prompt_len} tokens)")
        st.code(result.critique_prompt, language=None, wrap_lines=True)
    st.caption(f"Model: {escape_markdown(result.model)} · generation {result.timings.get('total_s', 0.0):.1f} s")


def draw_run(
    page: PageContext, query: str, context: str, settings: SelfCritiqueSettings, run: bool
) -> tuple[str, SelfCritiqueResult, bool] | None:
    """Run when asked (unless this key is stored), else pick the stored run to show.

    Returns:
        ``(shown key, result, streamed)``: ``streamed`` is ``True`` when the answers were drawn live just now;
        the stored run is this key's, else the last one shown. ``None`` when there is nothing to show.
    """

    def compute() -> SelfCritiqueResult | None:
        try:
            settings.validate()
        except ValueError as exc:
            st.error(plain_message(str(exc)))
            return None
        started = time.monotonic()
        result = run_live(page.handle, query, context, settings)
        if result is not None:  # the next estimate of this page's run learns from this run's time and work
            done, share = selfcritique_done(result, settings)
            observe_run(page.handle, SELFCRITIQUE, time.monotonic() - started, done)
            observe_fills(page.handle, SELFCRITIQUE, share)
        return result

    return run_or_show(
        stored_runs(),
        result_key(page.config, query, context, settings),
        SelfCritiqueResult,
        run=run,
        compute=compute,
        button="Run Self-Critique",
        nothing_yet=start_hint("Run Self-Critique", query, context, needs_context=False),
    )


def main() -> None:
    page = open_page("Self-Critique", early=early)
    query, context = early.query, early.context
    settings, run, estimate_line = draw_controls(page.config, page.handle, query, context)
    st.divider()
    found = draw_run(page, query, context, settings, run)
    if found is None:
        return
    shown, result, streamed = found
    if streamed:
        estimate_line.caption(
            run_estimate(page.handle, settings, work_of(page.config, page.handle, query, context, settings))
        )
    if not streamed:
        draw_answers(result)
    tag = keys.tag(shown)
    draw_score(result, settings.top_k)
    draw_entropies(result, settings.top_k, tag)
    st.divider()
    draw_export(result, settings.top_k)


main()
