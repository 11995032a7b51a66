"""Self-Critique: can the model leave its first answer's path when asked for a different one?

The page reads top to bottom like the UI: inputs and the Self-Critique controls, the two answers (streamed
while running), the score with its two factors, both entropy sequences one above the other, the score for
every K, and the export. All maths lives in ``core.selfcritique``; all drawing in ``components``.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

import streamlit as st

from components import detector_figures as figs
from components import inputs, session
from components.text import escape_markdown
from core.engine.dual_path import StreamEvent
from core.model.loading import ModelHandle
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

logger = logging.getLogger(__name__)
st.set_page_config(page_title="Self-Critique · Read or Recall", layout="wide")

RESULTS_KEY = "ror.sc.results"
LAST_KEY = "ror.sc.last"
MAX_RESULTS = 12
K_OPTIONS = [str(k) if k is not None else "full" for k in K_CHOICES]

CAVEAT = (
    "A high score says the model could not leave its first answer's path when explicitly asked for a different "
    "one — the paper's sign of policy collapse on contaminated (memorised) problems. It was designed for "
    "reasoning tasks after RL post-training; with short factual answers and a small model the signal is weak, "
    "it ranks prompts rather than certifying one, and it says nothing about which source the answer came from."
)


def draw_header() -> None:
    st.title("Self-Critique")
    st.caption(
        "The model answers (r₁), then is shown its own answer and asked for a different solution (r₂). "
        "If the token-entropy profiles of the two answers still line up, the model is stuck on one path. "
        "Score S = cos(zero-padded E₁, E₂) × min(|E₁|, |E₂|) / max(|E₁|, |E₂|); high ⇒ likely contaminated "
        "(Tao et al., arXiv:2510.09259)."
    )


def draw_inputs() -> tuple[str, str]:
    inputs.example_picker()
    return inputs.query_and_context()


def reset_instruction() -> None:
    session.set_stored("sc.instruction", DEFAULT_INSTRUCTION)


def draw_controls(config: session.AppConfig) -> tuple[SelfCritiqueSettings, bool]:
    """Path, K, instruction and the Run button; returns (settings, run clicked)."""
    left, right = st.columns([1, 1], gap="medium")
    with left:
        path = session.persistent(
            st.radio, "Answer", "sc.path", "without", options=["without", "with"],
            format_func=lambda v: "Without the context (parametric path, as in the paper)" if v == "without"
            else "With the context (retrieval path)",
            horizontal=False,
        )
        k_text = session.persistent(
            st.select_slider, "Top-K of the entropy", "sc.top_k", str(DEFAULT_K), options=K_OPTIONS,
            help="Entropy of the K most likely next tokens renormalised to one (the paper's approximation for "
            "APIs that return only the top-K log-probabilities); 'full' is the exact entropy over the whole "
            "vocabulary. Changing K re-scores instantly: no new generation.",
        )
    with right:
        instruction = session.persistent(
            st.text_area, "Critique instruction (appended to the query)", "sc.instruction", DEFAULT_INSTRUCTION,
            height=150, help=f"The paper's instruction, verbatim from the authors' code. {RESPONSE_SLOT} is replaced by r₁.",
        )
        st.button("Restore the paper's instruction", key="ror.sc.reset", on_click=reset_instruction)
    k = None if k_text == "full" else int(k_text)
    settings = SelfCritiqueSettings(
        max_new_tokens=config.settings.max_new_tokens, top_k=k, use_context=(path == "with"),
        template=config.settings.template, instruction=str(instruction),
    )
    st.caption(
        f"r₁ gets up to {settings.max_new_tokens} tokens (sidebar) and r₂ up to {settings.critique_tokens} "
        "(twice as many, as in the authors' code); both are greedy."
    )
    clicked = st.button("Run Self-Critique", type="primary", key="ror.sc.run", icon=":material/play_arrow:")
    return settings, clicked


def result_key(config: session.AppConfig, query: str, context: str, settings: SelfCritiqueSettings) -> str:
    """Cache key: everything that changes the generations (K does not: it only re-scores)."""
    return json.dumps(
        [config.model_spec, config.revision, query.strip(), context.strip() if settings.use_context else "",
         settings.use_context, settings.template, settings.instruction, settings.max_new_tokens, settings.critique_tokens],
        ensure_ascii=False,
    )


def stored_results() -> dict[str, dict[str, Any]]:
    return st.session_state.setdefault(RESULTS_KEY, {})


def keep(key: str, result: SelfCritiqueResult) -> None:
    results = stored_results()
    results.pop(key, None)
    results[key] = result.to_dict()
    while len(results) > MAX_RESULTS:
        results.pop(next(iter(results)))
    st.session_state[LAST_KEY] = key


def run_live(handle: ModelHandle, query: str, context: str, settings: SelfCritiqueSettings) -> SelfCritiqueResult | None:
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
            session.show_answer(box, "")
            bar = st.progress(0.0, text="Waiting…")
            slots[path] = (box, bar, limit)

    def on_event(event: StreamEvent) -> None:
        if event.path not in slots:
            return
        box, bar, limit = slots[event.path]
        session.show_answer(box, event.text)
        bar.progress(1.0 if event.done else min(1.0, event.n_tokens / max(1, limit)),
                     text=f"{event.n_tokens} / {limit} tokens" + (" · done" if event.done else ""))

    try:
        with st.spinner("Generating r₁, then the critique answer r₂…"):
            result = run_self_critique(handle, query, context, settings, on_event=on_event)
    except ValueError as exc:
        st.error(str(exc))
        return None
    except Exception as exc:  # noqa: BLE001 - keep the page alive, details in the log
        logger.exception("self-critique run failed")
        st.error(f"The run failed ({type(exc).__name__}). Details are in the server log.")
        return None
    for path, text in ((FIRST, result.first_answer), (CRITIQUE, result.critique_answer)):
        session.show_answer(slots[path][0], text)
    return result


def draw_answers(result: SelfCritiqueResult) -> None:
    left, right = st.columns(2, gap="medium")
    with left:
        st.subheader("First answer r₁")
        session.show_answer(st, result.first_answer)
        st.caption(f"{len(result.first_ids)} tokens · {result.first_finish}")
    with right:
        st.subheader("Critique answer r₂")
        session.show_answer(st, result.critique_answer)
        st.caption(f"{len(result.critique_ids)} tokens · {result.critique_finish}")


def draw_score(result: SelfCritiqueResult, k: int | None) -> None:
    st.subheader("Score")
    parts = figs.score_parts(result, k)
    c1, c2, c3 = st.columns(3)
    c1.metric("S (high ⇒ contaminated)", f"{parts['score']:.4f}", help="S = cosine × length ratio, in [0, 1].")
    c2.metric("cos(zero-padded E₁, E₂)", f"{parts['cosine']:.4f}")
    c3.metric("length ratio min/max", f"{parts['length_ratio']:.3f}",
              help=f"|E₁| = {len(result.first_ids)}, |E₂| = {len(result.critique_ids)} generated tokens.")
    st.caption(
        "S near 1: the critique answer repeats the first answer's uncertainty profile token for token (and its "
        "length) — the model did not find another path. S near 0: a different answer, or one of very different "
        "length. No threshold is given by the paper; compare prompts, or calibrate on labelled data "
        "(`python -m core evaluate --detectors selfcritique`)."
    )
    st.caption(CAVEAT)


def draw_entropies(result: SelfCritiqueResult, k: int | None, tag: str) -> None:
    st.subheader("Token entropies of the two answers")
    e1, e2 = result.entropies(k)
    st.plotly_chart(
        figs.entropy_sequences_figure(result.first_tokens, e1, result.critique_tokens, e2, k=k),
        key=f"ror.sc.entropy.{tag}.{k}",
    )
    with st.expander("The score for every K"):
        st.dataframe(figs.k_sweep_frame(result), hide_index=True)
        st.caption("The top-K approximation converges to the full-vocabulary entropy as K grows; the paper "
                   "reports near-identical AUC from K = 3 to 50.")


def draw_export(result: SelfCritiqueResult, k: int | None) -> None:
    st.subheader("Export")
    c1, c2 = st.columns(2)
    c1.download_button("Download the run (JSON)", data=json.dumps(result.to_dict(), ensure_ascii=False, indent=2),
                       file_name="self_critique.json", mime="application/json", on_click="ignore",
                       icon=":material/download:", key="ror.sc.dl.json")
    c2.download_button("Download the entropy sequences (CSV)", data=figs.entropy_frame(result, k).to_csv(index=False),
                       file_name="self_critique_entropies.csv", mime="text/csv", on_click="ignore",
                       icon=":material/download:", key="ror.sc.dl.csv")
    with st.expander("The exact prompts"):
        st.caption(f"First prompt ({result.first_prompt_len} tokens)")
        st.code(result.first_prompt, language=None, wrap_lines=True)
        st.caption(f"Critique prompt ({result.critique_prompt_len} tokens)")
        st.code(result.critique_prompt, language=None, wrap_lines=True)
    st.caption(f"Model: {escape_markdown(result.model)} · generation {result.timings.get('total_s', 0.0):.1f} s")


def main() -> None:
    config = session.sidebar()
    handle = session.get_handle(config.model_spec, config.revision)
    session.draw_model_facts(handle)
    draw_header()
    query, context = draw_inputs()
    settings, run = draw_controls(config)
    st.divider()
    key = result_key(config, query, context, settings)
    result: SelfCritiqueResult | None = None
    if run:
        if key in stored_results():
            st.toast("Same inputs and settings as an earlier run: showing its stored result.")
        else:
            try:
                settings.validate()
            except ValueError as exc:
                st.error(str(exc))
                return
            result = run_live(handle, query, context, settings)
            if result is None:
                return
            keep(key, result)
    shown = key
    if result is None:
        if key not in stored_results():
            shown = st.session_state.get(LAST_KEY, "")
        data = stored_results().get(shown)
        if data is not None and shown == key:
            st.session_state[LAST_KEY] = key
        if data is None:
            st.info("Type or pick a query, then press **Run Self-Critique**.")
            return
        result = SelfCritiqueResult.from_dict(data)
        if key not in stored_results():
            st.info("Showing the previous run: the inputs or settings have changed since. Press **Run Self-Critique** to analyse them.")
        draw_answers(result)
    tag = hashlib.sha1(shown.encode("utf-8")).hexdigest()[:12]
    draw_score(result, settings.top_k)
    draw_entropies(result, settings.top_k, tag)
    st.divider()
    draw_export(result, settings.top_k)


main()
