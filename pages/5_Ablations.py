"""Ablations: perturb chosen layers and see what changes (CRM §4.4, appendix J).

The page reads top to bottom like the UI: inputs and the clean run; the layers, ε and seed; then four
experiments — noise on the chosen layers (both answers re-generated next to the clean ones, Z and the KL
curve, the per-layer trajectory), the dose–response over ε, the single-layer sweep, and activation
patching. Every experiment runs only on its button and is kept in this session (a
:func:`~components.lru.session_lru`), so re-rendering or switching pages never re-runs the model. All maths
lives in :mod:`core.methods.ablation`; the controls in :mod:`components.ablation_controls`; all figures in
:mod:`figures.ablation`.
"""

from __future__ import annotations

from components import frame

frame.first_paint(
    "Ablations",
    plain="Shake some of the model's layers a little and see whether its answer, and how much the passage "
    "mattered, change: layers whose disturbance changes them carry part of that difference.",
    precise="Perturb chosen decoder layers and watch what changes: the two answers, the RePCS score Z, the KL per "
    "token and the per-layer trajectory. Noise: h′ = h + ε·σ(h)·N(0, 1) at each chosen layer's output; "
    "activation patching replaces the retrieval path's state at the last prompt token with the parametric "
    "path's. Layer ℓ is decoder layer ℓ (0-based); 'emb' is the embedding output.",
    citation="CRM (2025) §4.4 and appendix J (Tables 5 and 16).",
)  # on screen while the imports below run

from components import prologue

early = prologue.begin(with_inputs=True)  # the example picker, the query and the context: light modules only

import json
from typing import Any

import streamlit as st

from components import ablation_controls, keys, prefetch, state, widgets
from components.ablation_controls import Choice
from components.lru import SessionLRU, session_lru
from components.page import PageContext, open_page
from components.progress import StepTicker
from components.text import escape_markdown, plain_message
from core.engine import DualPathSettings
from core.engine.estimate import describe_estimate, dual_path_estimate, estimate
from core.engine.result import DualPathResult, result_digest
from core.engine.verdict import display
from core.methods import ablation
from core.methods.ablation import format_layers
from core.methods.ablation.degenerate import path_degeneracy
from core.model.handle import ModelHandle
from core.model.progress import Progress
from figures import ablation as figs

MAX_CACHED = 32
"""Experiments kept per browser session (clean trajectories, perturbed runs, noise grids)."""
NOISE_CAVEAT = (
    "Noise follows CRM §4.4: h′ = h + ε·σ(h)·N(0, 1) at the output of each chosen layer, at every position, "
    "on both paths, with σ(h) the standard deviation of each token's hidden state and the noise fixed by "
    "(seed, layer, position). A change in Z shows these layers carry part of what the context changes for "
    "this prompt. No change does not show they carry nothing: later layers can recover through the residual "
    "stream, which is why the paper tests blocks of layers, not only single ones."
)
PATCH_CAVEAT = (
    "Activation patching replaces the retrieval path's state h_ℓ at the last prompt token with the parametric "
    "path's state, then generates. The paper found this has almost no effect (ΔAUC < 0.01): the residual "
    "stream and the other context tokens let later layers recover. A small ΔZ here is expected and does not "
    "mean these layers are unimportant."
)


# ----------------------------------------------------------------------------------------------------------
# This page's experiments, kept in the session (never re-run on a re-render or page switch)


def experiments(current: str | None = None) -> SessionLRU[Any]:
    """The session's ablation results, keyed by :func:`_key` (``current``: the key remembering one of them)."""
    return session_lru(keys.ABLATE_RESULTS, MAX_CACHED, current=current)


def _key(*parts: Any) -> str:
    return json.dumps(parts, sort_keys=True, default=str)


def _short(value: Any) -> str:
    """A short stable hash of a JSON-able value (for element keys that must change with it)."""
    return keys.tag(_key(value))


def _ticker(n_tokens: int, runs: int) -> StepTicker:
    """A bar over a sweep's runs that also moves with every token of the run in progress."""
    return StepTicker(st.progress(0.0, text="Starting…"), steps_per_unit=n_tokens, total=runs)


def _progress_callback(ticker: StepTicker) -> Progress:
    def update(done: int, total: int, label: str) -> None:
        ticker.report(done, total, f"{done} / {total} runs · {label}")

    return update


def _clean_inputs(page: PageContext, clean: DualPathResult) -> tuple[ModelHandle, str, str, DualPathSettings]:
    """``(handle, query, context, settings)`` of the clean run: what every experiment runs again."""
    return page.handle, clean.query, clean.context, page.config.settings


def _run_estimate(page: PageContext, runs: int, tokens: int) -> str:
    """``"≈ 40 s on this machine"`` for ``runs`` scoring runs of ``tokens`` answer tokens each (measured cost)."""
    return describe_estimate(estimate(page.handle, generated_tokens=runs * tokens, forwards=3 * runs))


def _one_run_estimate(page: PageContext) -> str:
    """Before a noise or patching run: both answers again, then the scoring and the trajectory."""
    most = int(page.config.settings.max_new_tokens)
    return f"Both answers again, up to {most} tokens each: {_run_estimate(page, 1, most)}."


def _perturbed_run(page: PageContext, clean: DualPathResult, status: str, **intervention: Any) -> DualPathResult:
    """Both paths of the clean run re-generated under ``intervention`` (``noise=``, ``patch_layers=``), under a
    progress bar that moves with every generated token (``status`` names the run)."""
    first = clean.answer_token_ids[0] if clean.n_tokens else None
    most = int(page.config.settings.max_new_tokens)
    bar = st.progress(0.0, text=f"{status} ({_run_estimate(page, 1, most)})")

    def on_event(event: Any) -> None:
        if event.path == "retrieval":
            bar.progress(min(0.9, 0.9 * event.n_tokens / max(1, most)), text=f"{status} {event.n_tokens} tokens")
        elif event.path == "scoring":
            bar.progress(0.95, text="Scoring the two paths and the per-layer trajectory…")

    result = ablation.perturbed_run(
        *_clean_inputs(page, clean), clean_first_token=first, on_event=on_event, **intervention
    )
    bar.progress(1.0, text=f"Done in {result.timings.get('total_s', 0.0):.1f} s")
    return result


# ----------------------------------------------------------------------------------------------------------
# Page sections


def draw_clean_run(page: PageContext, query: str, context: str) -> DualPathResult | None:
    """The clean dual-path result of these inputs (stored, or run here on request)."""
    result = state.cached_result(page.config, query, context)
    if result is not None:
        st.caption(
            f"Clean run: Z = {result.repcs_score:.3f} nats over T = {result.score_window} tokens · "
            f"retrieval answer {result.n_tokens} tokens · verdict: {display(result.verdict)}"
        )
        return result
    st.info("Ablations compare against the clean run of these inputs and settings. Run it first.")
    clicked = st.button(
        "Run the clean analysis", type="primary", key=keys.ABLATE_RUN_CLEAN, icon=":material/play_arrow:"
    )
    st.caption(describe_estimate(dual_path_estimate(page.handle, page.config.settings.max_new_tokens)))
    if clicked:
        result, _ = widgets.run_or_reuse(page.config, page.handle, query, context)
        if result is not None:
            st.rerun()  # redraw with the stored clean result (nothing is run again)
    return None


def clean_trajectory(page: PageContext, clean: DualPathResult) -> ablation.Trajectory:
    """The clean per-layer trajectory (kept per result)."""
    key = _key("trajectory", result_digest(clean))
    traj = experiments().get(key)
    if traj is None:
        traj = prefetch.take(prefetch.TRAJECTORY, result_digest(clean))  # computed right after the run, if it was
        if traj is not None:
            experiments().put(key, traj)
    if traj is None:
        with st.spinner("Computing the clean per-layer trajectory (two forward passes)…"):
            traj = experiments().put(key, ablation.layer_trajectory(page.handle, clean))
    return traj


def draw_choice(n_layers: int, flagged: list[int] | None) -> Choice:
    """The layers to perturb, the noise scale ε and the seed."""
    st.subheader("Layers, noise scale and seed")
    layers, described = ablation_controls.layer_choice(n_layers, flagged)
    eps, seed = ablation_controls.noise_controls()
    st.caption(f"Chosen: {described} · ε = {eps:g} · seed {seed}")
    return Choice(layers, eps, seed)


def draw_comparison(
    clean: DualPathResult, perturbed: DualPathResult, clean_traj: ablation.Trajectory, intervened: list[int], tag: str
) -> None:
    """Answers (changed tokens marked), Z, log p of the first clean token, KL curves and the trajectory."""
    diff = ablation.compare(clean, perturbed)
    tag = f"{tag}.{result_digest(perturbed)}.{_short(perturbed.extras.get('intervention', {}).get('noise'))}"
    c1, c2, c3, c4 = st.columns(4)
    c1.metric("Z clean", f"{diff['z_clean']:.3f} nats")
    c2.metric("Z perturbed", f"{diff['z_perturbed']:.3f} nats", delta=f"{diff['delta_z']:+.3f}", delta_color="off")
    lp = perturbed.extras.get("first_token_logprob")
    c3.metric(
        "log p(first clean token), retrieval",
        "—" if lp is None else f"{lp:.3f}",
        delta=None if lp is None or not clean.n_tokens else f"{lp - float(clean.retrieval.logprob[0]):+.3f}",
        delta_color="off",
        help="Log-probability the retrieval path gives the clean answer's first token, perturbed (delta vs clean).",
    )
    flags = path_degeneracy(perturbed)
    broken = [name for name, flag in flags.items() if flag.degenerate]
    c4.metric(
        "Verdict",
        display(perturbed.verdict),
        delta="degenerate answer" if broken else None,
        delta_color="inverse" if broken else "off",
        delta_arrow="off",
        help=f"clean: {display(clean.verdict)}",
    )
    for name in broken:
        st.warning(
            f"The perturbed {name} answer is {flags[name].summary}. Its Z and verdict describe broken text, not "
            "a change in where the answer comes from: lower ε or perturb fewer layers for a graded effect.",
            icon=":material/warning:",
        )

    left, right = widgets.answer_columns()
    paths = (
        (left, clean.retrieval, perturbed.retrieval, diff["rag_changed"], "retrieval"),
        (right, clean.parametric, perturbed.parametric, diff["parametric_changed"], "parametric"),
    )
    for column, clean_path, new_path, changed, label in paths:
        with column:
            st.caption("Clean")
            widgets.show_answer(st, clean_path.answer)
            st.caption(f"Perturbed — {sum(changed)} of {len(changed)} tokens changed (highlighted)")
            st.plotly_chart(
                figs.token_diff_figure(new_path.tokens, changed, clean_path.tokens),
                key=keys.scoped(keys.ABLATE_DIFF, label, tag),
            )
            widgets.show_answer(st, new_path.answer)

    st.markdown("**KL per answer token, clean vs perturbed**")
    st.caption(
        "Each curve is over its own retrieval answer: once the perturbed answer differs, position t compares "
        "different tokens."
    )
    st.plotly_chart(
        figs.kl_compare_figure(
            clean.answer_tokens, clean.token_kl, perturbed.answer_tokens, perturbed.token_kl, clean.score_window
        ),
        key=keys.scoped(keys.ABLATE_KL, tag),
    )
    traj = perturbed.extras.get("trajectory")
    if traj is not None:
        pert = ablation.Trajectory.from_dict(traj)
        st.markdown("**Per-layer trajectory at the last prompt token, clean vs perturbed**")
        st.caption(escape_markdown(clean_traj.note))
        st.plotly_chart(
            figs.trajectory_figure(
                clean_traj.values, pert.values, kind=clean_traj.kind, intervened=intervened, flagged=clean_traj.flagged
            ),
            key=keys.scoped(keys.ABLATE_TRAJ, tag),
        )
    payload = {"perturbed": perturbed.to_dict(), "comparison": diff, "clean_trajectory": clean_traj.to_dict()}
    data = json.dumps(payload, ensure_ascii=False, indent=2, allow_nan=False)
    label = "Download the perturbed result and the comparison (JSON)"
    widgets.download(st, label, data, "read_or_recall_ablation.json", key=keys.scoped(keys.ABLATE_DOWNLOAD, tag))


def draw_noise_run(
    page: PageContext,
    clean: DualPathResult,
    clean_traj: ablation.Trajectory,
    choice: Choice,
) -> None:
    """Both paths re-generated under noise on the chosen layers (or the last such run on this clean result)."""
    layers, eps, seed = choice
    st.caption(NOISE_CAVEAT)
    tag = result_digest(clean)
    key = _key("noise", tag, layers, eps, seed)
    runs = experiments(current=keys.scoped(keys.ABLATE_LAST_NOISE, tag))  # current: the last noise run on it
    clicked = st.button(
        "Run with noise", type="primary", key=keys.ABLATE_RUN_NOISE, disabled=not layers, icon=":material/blur_on:"
    )
    st.caption(_one_run_estimate(page))
    if clicked:
        status = f"Both paths under noise ε = {eps:g} on layers {format_layers(layers)}, seed {seed}…"
        runs.put(key, _perturbed_run(page, clean, status, noise=choice.noise()))
        runs.set_current(key)
    result = runs.get(key)
    if result is None:
        result = runs.current()
        if result is None:
            return
        spec = result.extras.get("intervention", {}).get("noise", {})
        st.info(
            f"Showing the last noise run (layers {format_layers(spec.get('layers', []))}, ε = {spec.get('eps')}, "
            f"seed {spec.get('seed')}); the choice above has changed since. Press **Run with noise** to run it."
        )
    spec = result.extras.get("intervention", {}).get("noise", {})
    draw_comparison(clean, result, clean_traj, [int(x) for x in spec.get("layers", [])], "noise")


def draw_dose_response(page: PageContext, clean: DualPathResult, layers: list[int]) -> None:
    """Z and log p(first clean token) against ε for noise on the chosen layers, over several seeds."""
    st.caption(
        "Z and the retrieval path's log-probability of the clean answer's first token against ε, for noise on "
        "the chosen layers: mean ± 1 sd over seeds (dots are single seeds; dashed = clean). Runs use short "
        "answers (T = the answer length below), so Z here is not on the scale of the Dual Path page's Z. Z sums "
        "over the answer actually generated: a perturbed answer that no longer stops early sums more tokens "
        "(see the answer-length column)."
    )
    c1, c2, c3 = st.columns([3, 1, 1])
    with c1:
        grid_eps = ablation_controls.eps_grid()
    with c2:
        seeds = ablation_controls.seeds("Seeds per ε", keys.ABLATE_GRID_SEEDS, 3, 10)
    with c3:
        n_tokens = ablation_controls.tokens_per_run(keys.ABLATE_GRID_TOKENS)
    runs = 1 + sum(len(seeds) for e in grid_eps if e > 0)
    key = _key("dose", result_digest(clean), layers, sorted(grid_eps), seeds, int(n_tokens))
    st.caption(f"{runs} runs of up to {int(n_tokens)} tokens: {_run_estimate(page, runs, int(n_tokens))}.")
    if st.button(f"Run the dose–response ({runs} runs)", key=keys.ABLATE_RUN_DOSE, disabled=not (layers and grid_eps)):
        ticker = _ticker(int(n_tokens), runs)
        try:
            with ticker.listening():
                grid = ablation.dose_response(
                    *_clean_inputs(page, clean),
                    layers,
                    grid_eps,
                    seeds,
                    max_new_tokens=int(n_tokens),
                    progress=_progress_callback(ticker),
                )
        except ValueError as exc:
            st.error(plain_message(str(exc)))
            return
        ticker.bar.progress(1.0, text=f"Done: {runs} runs in {grid.timings['total_s']:.1f} s")
        experiments().put(key, grid)
    grid = experiments().get(key)
    if grid is None:
        return
    st.plotly_chart(figs.dose_response_figure(grid), key=keys.scoped(keys.ABLATE_DOSE, _short(key)))
    st.dataframe(figs.grid_summary_frame(grid), hide_index=True)
    draw_downloads(grid, "dose_response")


def draw_layer_sweep(page: PageContext, clean: DualPathResult, eps: float, flagged: list[int]) -> None:
    """ΔZ for noise at ε on one layer at a time (CRM appendix J)."""
    st.caption(
        "Noise at the ε above on one layer at a time (CRM appendix J): ΔZ = Z(noise on layer ℓ) − Z(clean) per "
        "layer. Single layers often look harmless when the information is spread over a block (the paper's "
        "distributed-encoding finding) — compare with the dose–response of a block."
    )
    c1, c2 = st.columns(2)
    with c1:
        seeds = ablation_controls.seeds(
            "Seeds per layer", keys.ABLATE_SWEEP_SEEDS, 1, 5, per_layer_of=page.handle.info.n_layers
        )
    with c2:
        n_tokens = ablation_controls.tokens_per_run(keys.ABLATE_SWEEP_TOKENS)
    runs = 1 + page.handle.info.n_layers * len(seeds)
    key = _key("sweep", result_digest(clean), eps, seeds, int(n_tokens))
    st.caption(f"{runs} runs of up to {int(n_tokens)} tokens: {_run_estimate(page, runs, int(n_tokens))}.")
    if st.button(
        f"Sweep every layer at ε = {eps:g} ({runs} runs)", key=keys.ABLATE_RUN_SWEEP, disabled=eps <= 0 or not seeds
    ):
        ticker = _ticker(int(n_tokens), runs)
        with ticker.listening():
            grid = ablation.layer_sweep(
                *_clean_inputs(page, clean),
                eps,
                seeds,
                max_new_tokens=int(n_tokens),
                progress=_progress_callback(ticker),
            )
        ticker.bar.progress(1.0, text=f"Done: {runs} runs in {grid.timings['total_s']:.1f} s")
        experiments().put(key, grid)
    if eps <= 0:
        st.caption("Choose ε > 0 for a sweep.")
    grid = experiments().get(key)
    if grid is None:
        return
    st.plotly_chart(figs.layer_sweep_figure(grid, flagged=flagged), key=keys.scoped(keys.ABLATE_SWEEP, _short(key)))
    with st.expander("Per-layer table"):
        st.dataframe(figs.grid_summary_frame(grid), hide_index=True)
    draw_downloads(grid, "layer_sweep")


def draw_patching(
    page: PageContext,
    clean: DualPathResult,
    clean_traj: ablation.Trajectory,
    choice: Choice,
) -> None:
    """Activation patching on the chosen layers (optionally with the noise above), then the comparison."""
    layers = choice.layers
    st.caption(PATCH_CAVEAT)
    combine = state.persistent(
        st.checkbox, "Also inject noise (the ε and seed above, on the same layers)", keys.ABLATE_PATCH_NOISE, False
    )
    noise = choice.noise() if combine and layers and choice.eps > 0 else None
    key = _key("patch", result_digest(clean), layers, noise.to_dict() if noise else None)
    clicked = st.button(
        f"Patch layers {format_layers(layers) or '—'}",
        key=keys.ABLATE_RUN_PATCH,
        disabled=not layers,
        icon=":material/swap_horiz:",
    )
    st.caption(_one_run_estimate(page))
    if clicked:
        status = "Generating with patched states…"
        experiments().put(key, _perturbed_run(page, clean, status, noise=noise, patch_layers=layers))
    result = experiments().get(key)
    if result is None:
        return
    for warning in result.warnings:
        st.warning(plain_message(warning))
    draw_comparison(clean, result, clean_traj, layers, "patch")


def draw_downloads(grid: ablation.NoiseGrid, name: str) -> None:
    """CSV and JSON downloads of a noise grid."""
    left, right = st.columns(2)
    csv = figs.grid_frame(grid).to_csv(index=False)
    widgets.download(left, "Download (CSV)", csv, f"{name}.csv", key=keys.scoped(keys.ABLATE_CSV, name))
    data = json.dumps(grid.to_dict(), ensure_ascii=False, indent=2, allow_nan=False)
    widgets.download(right, "Download (JSON)", data, f"{name}.json", key=keys.scoped(keys.ABLATE_JSON, name))


def main() -> None:
    page = open_page("Ablations", early=early)
    query, context = early.query, early.context
    clean = draw_clean_run(page, query, context)
    if clean is None:
        return
    try:
        clean_traj = clean_trajectory(page, clean)
    except ValueError as exc:  # an unsupported architecture
        st.error(plain_message(str(exc)))
        return
    flagged = clean_traj.flagged if clean_traj.kind == "lts" else None
    st.divider()
    choice = draw_choice(page.handle.info.n_layers, flagged)
    noise_tab, dose_tab, sweep_tab, patch_tab = st.tabs(
        ["Noise on the chosen layers", "Dose–response", "Single-layer sweep", "Activation patching"]
    )
    with noise_tab:
        draw_noise_run(page, clean, clean_traj, choice)
    with dose_tab:
        draw_dose_response(page, clean, choice.layers)
    with sweep_tab:
        draw_layer_sweep(page, clean, choice.eps, flagged or [])
    with patch_tab:
        draw_patching(page, clean, clean_traj, choice)


main()
