"""Ablations: perturb chosen layers and see what changes (CRM §4.4, appendix J).

The page reads top to bottom like the UI: inputs and the clean run; the layers, ε and seed; then four
experiments — noise on the chosen layers (both answers re-generated next to the clean ones, Z and the KL
curve, the per-layer trajectory), the dose–response over ε, the single-layer sweep, and activation
patching. Every experiment runs only on its button and is kept in this session, so re-rendering or switching
pages never re-runs the model. All maths lives in ``core.ablation``; all figures in
``components.ablation_figures``.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from typing import Any

import streamlit as st

from components import ablation_figures as figs
from components import inputs, panels, session
from components.text import escape_markdown
from core.methods.ablation import experiments as ablation
from core.methods.ablation.interventions import NoiseSpec, format_layers, layer_preset, parse_layers
from core.model.loading import ModelHandle
from core.engine.result import DualPathResult

st.set_page_config(page_title="Ablations · Read or Recall", layout="wide")

_CACHE = "ror.ablate.results"
_MAX_CACHED = 32
PRESET_LABELS = {
    "early": "Early third",
    "middle": "Middle third",
    "late": "Late third",
    "control": "CRM's early-control block (layers 0–7)",
    "all": "All layers",
    "flagged": "Flagged by Layer trajectories (CRM rule)",
}
MODES = ("Preset", "Contiguous block", "Single layer", "Custom list")
EPS_CHOICES = (0.0, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0)

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
# Session cache of this page's results (never re-run on a re-render or page switch)


def _cache() -> OrderedDict[str, Any]:
    if _CACHE not in st.session_state:
        st.session_state[_CACHE] = OrderedDict()
    return st.session_state[_CACHE]


def _key(*parts: Any) -> str:
    return json.dumps(parts, sort_keys=True, default=str)


def _short(value: Any) -> str:
    """A short stable hash of a JSON-able value (for element keys that must change with it)."""
    return hashlib.sha1(_key(value).encode("utf-8")).hexdigest()[:10]


def cached(key: str) -> Any | None:
    return _cache().get(key)


def keep(key: str, value: Any) -> Any:
    cache = _cache()
    cache.pop(key, None)
    cache[key] = value
    while len(cache) > _MAX_CACHED:
        cache.popitem(last=False)
    return value


def _progress_callback(bar: Any) -> ablation.ProgressCallback:
    def update(done: int, total: int, label: str) -> None:
        bar.progress(min(1.0, done / max(1, total)), text=f"{done} / {total} runs · {label}")

    return update


# ----------------------------------------------------------------------------------------------------------
# Page sections


def draw_header() -> None:
    st.title("Ablations")
    st.caption(
        "Perturb chosen decoder layers and watch what changes: the two answers, the RePCS score Z, the KL per "
        "token and the per-layer trajectory. Noise injection and activation patching follow CRM §4.4. "
        "Layer ℓ is decoder layer ℓ (0-based); 'emb' is the embedding output."
    )


def draw_inputs() -> tuple[str, str]:
    inputs.example_picker()
    return inputs.query_and_context()


def draw_clean_run(config: session.AppConfig, handle: ModelHandle, query: str, context: str) -> DualPathResult | None:
    """The clean dual-path result of these inputs (stored, or run here on request)."""
    result = session.cached_result(config, query, context)
    if result is not None:
        st.caption(
            f"Clean run: Z = {result.repcs_score:.3f} nats over T = {result.score_window} tokens · "
            f"retrieval answer {result.n_tokens} tokens · verdict {escape_markdown(result.verdict)}"
        )
        return result
    st.info("Ablations compare against the clean run of these inputs and settings. Run it first.")
    if st.button("Run the clean analysis", type="primary", key="ror.ablate.run_clean", icon=":material/play_arrow:"):
        result, _ = session.run_or_reuse(config, handle, query, context)
        if result is not None:
            st.rerun()  # redraw with the stored clean result (nothing is run again)
    return None


def clean_trajectory(handle: ModelHandle, clean: DualPathResult) -> ablation.Trajectory:
    """The clean per-layer trajectory (cached per result)."""
    key = _key("trajectory", panels.result_tag(clean))
    traj = cached(key)
    if traj is None:
        with st.spinner("Computing the clean per-layer trajectory (two forward passes)…"):
            traj = keep(key, ablation.layer_trajectory(handle, clean))
    return traj


def draw_layer_choice(n_layers: int, flagged: list[int] | None) -> tuple[list[int], str]:
    """Mode (preset / block / single / custom) and the layers it selects; returns (layers, description)."""
    st.subheader("Layers, noise scale and seed")
    mode = session.persistent(st.radio, "Choose layers by", "ablate.mode", MODES[0], options=list(MODES), horizontal=True)
    if mode == "Preset":
        presets = [p for p in PRESET_LABELS if p != "flagged" or flagged]
        if session.stored("ablate.preset") not in presets:
            session.set_stored("ablate.preset", "middle")
        preset = session.persistent(
            st.selectbox, "Preset", "ablate.preset", "middle", options=presets, format_func=PRESET_LABELS.__getitem__
        )
        if flagged is None:
            st.caption("No CRM basis is calibrated for this model and template, so no layers are flagged to offer.")
        elif not flagged:
            st.caption("The CRM rule flags no layer for this run (every LTS_ℓ within 2σ of calibration).")
        layers = list(flagged or []) if preset == "flagged" else layer_preset(preset, n_layers)
        return layers, f"{PRESET_LABELS[preset]}: layers {format_layers(layers)}"
    if mode == "Contiguous block":
        stored = session.stored("ablate.block")
        if not (isinstance(stored, (list, tuple)) and len(stored) == 2 and 0 <= stored[0] <= stored[1] < n_layers):
            mid = layer_preset("middle", n_layers)
            session.set_stored("ablate.block", (mid[0], mid[-1]))
        lo, hi = session.persistent(
            st.slider, "Block of layers", "ablate.block", (0, 0), min_value=0, max_value=n_layers - 1
        )
        layers = list(range(int(lo), int(hi) + 1))
        return layers, f"block {format_layers(layers)}"
    if mode == "Single layer":
        if not isinstance(session.stored("ablate.single"), int) or not 0 <= session.stored("ablate.single") < n_layers:
            session.set_stored("ablate.single", n_layers // 2)
        layer = session.persistent(st.slider, "Layer", "ablate.single", 0, min_value=0, max_value=n_layers - 1)
        return [int(layer)], f"layer {int(layer)}"
    text = session.persistent(
        st.text_input, "Layers", "ablate.custom", "4-8", help="Numbers, ranges and presets: e.g. 2,5-7 or early,20"
    )
    try:
        layers = parse_layers(text, n_layers)
    except ValueError as exc:
        st.error(str(exc))
        return [], "no valid layers"
    return layers, f"layers {format_layers(layers)}"


def draw_noise_controls() -> tuple[float, int]:
    left, right = st.columns([3, 1])
    with left:
        eps = session.persistent(
            st.slider, "Noise scale ε", "ablate.eps", 0.1, min_value=0.0, max_value=1.0, step=0.05,
            help="h′ = h + ε·σ(h)·N(0, 1): ε is the noise size relative to each token's activation spread.",
        )
    with right:
        seed = session.persistent(st.number_input, "Seed", "ablate.seed", 0, min_value=0, max_value=2**31 - 1, step=1)
    return float(eps), int(seed)


def draw_comparison(clean: DualPathResult, perturbed: DualPathResult, clean_traj: ablation.Trajectory,
                    intervened: list[int], tag: str) -> None:
    """Answers (changed tokens marked), Z, log p of the first clean token, KL curves and the trajectory."""
    diff = ablation.compare(clean, perturbed)
    tag = f"{tag}.{panels.result_tag(perturbed)}.{_short(perturbed.extras.get('intervention', {}).get('noise'))}"
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
    c4.metric("Verdict", perturbed.verdict, help=f"clean: {clean.verdict}")

    left, right = session.answer_columns()
    for column, clean_text, new_text, new_tokens, changed, clean_tokens, label in (
        (left, clean.retrieval.answer, perturbed.retrieval.answer, perturbed.answer_tokens, diff["rag_changed"],
         clean.answer_tokens, "retrieval"),
        (right, clean.parametric.answer, perturbed.parametric.answer, perturbed.parametric.tokens,
         diff["parametric_changed"], clean.parametric.tokens, "parametric"),
    ):
        with column:
            st.caption("Clean")
            session.show_answer(st, clean_text)
            st.caption(f"Perturbed — {sum(changed)} of {len(changed)} tokens changed (highlighted)")
            st.plotly_chart(figs.token_diff_figure(new_tokens, changed, clean_tokens), key=f"ror.ablate.diff.{label}.{tag}")
            session.show_answer(st, new_text)

    st.markdown("**KL per answer token, clean vs perturbed**")
    st.caption(
        "Each curve is over its own retrieval answer: once the perturbed answer differs, position t compares "
        "different tokens."
    )
    st.plotly_chart(
        figs.kl_compare_figure(clean.answer_tokens, clean.token_kl, perturbed.answer_tokens, perturbed.token_kl,
                               clean.score_window),
        key=f"ror.ablate.kl.{tag}",
    )
    traj = perturbed.extras.get("trajectory")
    if traj is not None:
        pert = ablation.Trajectory.from_dict(traj)
        st.markdown("**Per-layer trajectory at the last prompt token, clean vs perturbed**")
        st.caption(escape_markdown(clean_traj.note))
        st.plotly_chart(
            figs.trajectory_figure(clean_traj.values, pert.values, kind=clean_traj.kind, intervened=intervened,
                                   flagged=clean_traj.flagged),
            key=f"ror.ablate.traj.{tag}",
        )
    st.download_button(
        "Download the perturbed result and the comparison (JSON)",
        data=json.dumps({"perturbed": perturbed.to_dict(), "comparison": diff, "clean_trajectory": clean_traj.to_dict()},
                        ensure_ascii=False, indent=2, allow_nan=False),
        file_name="read_or_recall_ablation.json", mime="application/json", on_click="ignore",
        icon=":material/download:", key=f"ror.ablate.dl.{tag}",
    )


def draw_noise_run(config: session.AppConfig, handle: ModelHandle, clean: DualPathResult, clean_traj: ablation.Trajectory,
                   layers: list[int], eps: float, seed: int) -> None:
    st.caption(NOISE_CAVEAT)
    tag = panels.result_tag(clean)
    key = _key("noise", tag, layers, eps, seed)
    last = f"ror.ablate.last_noise.{tag}"
    if st.button("Run with noise", type="primary", key="ror.ablate.run_noise", disabled=not layers,
                 icon=":material/blur_on:"):
        with st.status(f"Both paths under noise ε = {eps:g} on layers {format_layers(layers)}, seed {seed}…") as status:
            result = ablation.perturbed_run(
                handle, clean.query, clean.context, config.settings, noise=NoiseSpec(tuple(layers), eps, seed),
                clean_first_token=clean.answer_token_ids[0] if clean.n_tokens else None,
            )
            status.update(label="Done", state="complete")
        keep(key, result)
        st.session_state[last] = key
    result = cached(key)
    if result is None:
        result = cached(st.session_state.get(last, ""))  # the last noise run on this clean result
        if result is None:
            return
        spec = result.extras.get("intervention", {}).get("noise", {})
        st.info(
            f"Showing the last noise run (layers {format_layers(spec.get('layers', []))}, ε = {spec.get('eps')}, "
            f"seed {spec.get('seed')}); the choice above has changed since. Press **Run with noise** to run it."
        )
    spec = result.extras.get("intervention", {}).get("noise", {})
    draw_comparison(clean, result, clean_traj, [int(x) for x in spec.get("layers", [])], "noise")


def draw_dose_response(config: session.AppConfig, handle: ModelHandle, clean: DualPathResult, layers: list[int]) -> None:
    st.caption(
        "Z and the retrieval path's log-probability of the clean answer's first token against ε, for noise on "
        "the chosen layers: mean ± 1 sd over seeds (dots are single seeds; dashed = clean). Runs use short "
        "answers (T = the answer length below), so Z here is not on the scale of the Dual Path page's Z. Z sums "
        "over the answer actually generated: a perturbed answer that no longer stops early sums more tokens "
        "(see the answer-length column)."
    )
    c1, c2, c3 = st.columns([3, 1, 1])
    with c1:
        grid_eps = session.persistent(st.multiselect, "ε grid", "ablate.grid", [0.0, 0.1, 0.25, 0.5, 1.0],
                                      options=list(EPS_CHOICES))
    with c2:
        n_seeds = session.persistent(st.number_input, "Seeds per ε", "ablate.grid_seeds", 3, min_value=1, max_value=10)
    with c3:
        n_tokens = session.persistent(st.number_input, "Answer tokens per run", "ablate.grid_tokens",
                                      ablation.SWEEP_MAX_NEW_TOKENS, min_value=1, max_value=128)
    seed0 = int(session.stored("ablate.seed", 0) or 0)
    seeds = list(range(seed0, seed0 + int(n_seeds)))
    runs = 1 + sum(len(seeds) for e in grid_eps if e > 0)
    key = _key("dose", panels.result_tag(clean), layers, sorted(grid_eps), seeds, int(n_tokens))
    if st.button(f"Run the dose–response ({runs} runs)", key="ror.ablate.run_dose", disabled=not (layers and grid_eps)):
        bar = st.progress(0.0, text="Starting…")
        try:
            grid = ablation.dose_response(handle, clean.query, clean.context, config.settings, layers, grid_eps, seeds,
                                          max_new_tokens=int(n_tokens), progress=_progress_callback(bar))
        except ValueError as exc:
            st.error(str(exc))
            return
        bar.progress(1.0, text=f"Done: {runs} runs in {grid.timings['total_s']:.1f} s")
        keep(key, grid)
    grid = cached(key)
    if grid is None:
        return
    st.plotly_chart(figs.dose_response_figure(grid), key=f"ror.ablate.dose.{_short(key)}")
    st.dataframe(figs.grid_summary_frame(grid), hide_index=True)
    _downloads(grid, "dose_response")


def draw_layer_sweep(config: session.AppConfig, handle: ModelHandle, clean: DualPathResult, eps: float,
                     flagged: list[int]) -> None:
    st.caption(
        "Noise at the ε above on one layer at a time (CRM appendix J): ΔZ = Z(noise on layer ℓ) − Z(clean) per "
        "layer. Single layers often look harmless when the information is spread over a block (the paper's "
        "distributed-encoding finding) — compare with the dose–response of a block."
    )
    c1, c2 = st.columns(2)
    with c1:
        n_seeds = session.persistent(st.number_input, "Seeds per layer", "ablate.sweep_seeds", 1, min_value=1, max_value=5)
    with c2:
        n_tokens = session.persistent(st.number_input, "Answer tokens per run", "ablate.sweep_tokens",
                                      ablation.SWEEP_MAX_NEW_TOKENS, min_value=1, max_value=128)
    seed0 = int(session.stored("ablate.seed", 0) or 0)
    seeds = list(range(seed0, seed0 + int(n_seeds)))
    n_layers = handle.info.n_layers
    runs = 1 + n_layers * len(seeds)
    key = _key("sweep", panels.result_tag(clean), eps, seeds, int(n_tokens))
    if st.button(f"Sweep every layer at ε = {eps:g} ({runs} runs)", key="ror.ablate.run_sweep", disabled=eps <= 0):
        bar = st.progress(0.0, text="Starting…")
        grid = ablation.layer_sweep(handle, clean.query, clean.context, config.settings, eps, seeds,
                                    max_new_tokens=int(n_tokens), progress=_progress_callback(bar))
        bar.progress(1.0, text=f"Done: {runs} runs in {grid.timings['total_s']:.1f} s")
        keep(key, grid)
    if eps <= 0:
        st.caption("Choose ε > 0 for a sweep.")
    grid = cached(key)
    if grid is None:
        return
    st.plotly_chart(figs.layer_sweep_figure(grid, flagged=flagged), key=f"ror.ablate.sweep.{_short(key)}")
    with st.expander("Per-layer table"):
        st.dataframe(figs.grid_summary_frame(grid), hide_index=True)
    _downloads(grid, "layer_sweep")


def draw_patching(config: session.AppConfig, handle: ModelHandle, clean: DualPathResult, clean_traj: ablation.Trajectory,
                  layers: list[int], eps: float, seed: int) -> None:
    st.caption(PATCH_CAVEAT)
    combine = session.persistent(
        st.checkbox, "Also inject noise (the ε and seed above, on the same layers)", "ablate.patch_noise", False
    )
    noise = NoiseSpec(tuple(layers), eps, seed) if combine and layers and eps > 0 else None
    key = _key("patch", panels.result_tag(clean), layers, noise.to_dict() if noise else None)
    if st.button(f"Patch layers {format_layers(layers) or '—'}", key="ror.ablate.run_patch", disabled=not layers,
                 icon=":material/swap_horiz:"):
        with st.status("Generating with patched states…") as status:
            result = ablation.perturbed_run(
                handle, clean.query, clean.context, config.settings, noise=noise, patch_layers=layers,
                clean_first_token=clean.answer_token_ids[0] if clean.n_tokens else None,
            )
            status.update(label="Done", state="complete")
        keep(key, result)
    result = cached(key)
    if result is None:
        return
    for warning in result.warnings:
        st.warning(escape_markdown(warning))
    draw_comparison(clean, result, clean_traj, layers, "patch")


def _downloads(grid: ablation.NoiseGrid, name: str) -> None:
    left, right = st.columns(2)
    left.download_button("Download (CSV)", data=figs.grid_frame(grid).to_csv(index=False), file_name=f"{name}.csv",
                         mime="text/csv", on_click="ignore", icon=":material/download:", key=f"ror.ablate.csv.{name}")
    right.download_button("Download (JSON)", data=json.dumps(grid.to_dict(), ensure_ascii=False, indent=2, allow_nan=False),
                          file_name=f"{name}.json", mime="application/json", on_click="ignore",
                          icon=":material/download:", key=f"ror.ablate.json.{name}")


def main() -> None:
    config = session.sidebar()
    handle = session.get_handle(config.model_spec, config.revision)
    session.draw_model_facts(handle)

    draw_header()
    query, context = draw_inputs()
    clean = draw_clean_run(config, handle, query, context)
    if clean is None:
        return
    try:
        clean_traj = clean_trajectory(handle, clean)
    except ValueError as exc:  # an unsupported architecture
        st.error(str(exc))
        return
    flagged = clean_traj.flagged if clean_traj.kind == "lts" else None
    st.divider()
    layers, described = draw_layer_choice(handle.info.n_layers, flagged)
    eps, seed = draw_noise_controls()
    st.caption(f"Chosen: {described} · ε = {eps:g} · seed {seed}")
    noise_tab, dose_tab, sweep_tab, patch_tab = st.tabs(
        ["Noise on the chosen layers", "Dose–response", "Single-layer sweep", "Activation patching"]
    )
    with noise_tab:
        draw_noise_run(config, handle, clean, clean_traj, layers, eps, seed)
    with dose_tab:
        draw_dose_response(config, handle, clean, layers)
    with sweep_tab:
        draw_layer_sweep(config, handle, clean, eps, flagged or [])
    with patch_tab:
        draw_patching(config, handle, clean, clean_traj, layers, eps, seed)


main()
