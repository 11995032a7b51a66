"""Layer trajectories: how far, and in which direction, the context moves the hidden state at every layer.

The page opens on the last dual-path run: the CRM calibration in use, the direction (PC1 or supervised),
the latent trajectory shift LTS_ℓ = ⟨d_ℓ, v_ℓ⟩ against the calibration band μ ± 2σ (CRM eq. 1 and its audit
rule), the L2-norm and logit-lens baselines on the same layer axis, the same quantities at every answer
position, the cross-validated CRM classifier on the calibration prompts, and the export.
"""

from __future__ import annotations

from components import frame

frame.first_paint(
    "Layer trajectories",
    plain="Layer by layer, how far does adding the passage move the model's internal state, and in which "
    "direction? The chart compares this run with prompts whose answers are known to come from memory or "
    "from the passage.",
    precise="The displacement d_ℓ = h_ℓ(with context) − h_ℓ(without context) of every layer ℓ at the last prompt "
    "token, projected on a calibrated direction v_ℓ (PC1 of the calibration displacements): "
    "LTS_ℓ = ⟨d_ℓ, v_ℓ⟩. A layer is flagged when its LTS lies outside μ_ℓ ± 2σ_ℓ of the calibration rows. "
    "CRM detects whether internal computation differs systematically for memorized-like contexts; it does "
    "not certify which source a single generation used.",
    citation="CRM (2025) eq. 1 and appendix V.1.",
)  # on screen while the imports below run

import json
from typing import Any

import streamlit as st

from components import controls, keys, widgets
from components import internals_state as views
from components.redeep_view import draw_redeep
from core.engine.result import DualPathResult
from core.methods.crm import DIRECTIONS, PC1, SUPERVISED, CrmBasis, crm_report, supervised_score
from core.methods.internals import Internals
from core.model.handle import ModelHandle
from figures.layer_axes import row_label, row_names
from figures.trajectory import (
    DIRECTION_LABELS,
    QUANTITIES,
    classifier_frame,
    layer_table,
    positions_figure,
    run_baselines_figure,
    run_lts,
    run_lts_figure,
)


def draw_basis(handle: ModelHandle, result: DualPathResult) -> CrmBasis | None:
    basis = views.basis_for(handle, result.template)
    if basis is None:
        return views.draw_compute_basis(handle, result.template, key=keys.TRAJ_COMPUTE)
    meta = basis.meta
    st.caption(
        f"Calibration: {meta.get('n_memorized', '?')} memorized-style + {meta.get('n_grounded', '?')} grounded prompts "
        f"({meta.get('prompt_set', 'bundled set')}), template {basis.template!r}; kept layers (variance ratio > "
        f"{basis.evr_threshold}): {', '.join(row_label(r) for r in basis.kept_layers) or 'none'}. "
        + (
            "Rule: the paper's — PC1's explained-variance ratio within each layer; on about 100 prompts it keeps "
            "every layer whose displacements vary."
            if basis.layer_rule == "within_layer"
            else "Rule: share of the total — a layer's PC1 variance as a share of the calibration displacements' "
            "variance over all layers (keeps the deep layers)."
        )
    )
    return basis


def draw_direction() -> str:
    return str(
        controls.choice(
            st.radio,
            "Direction v_ℓ",
            keys.CRM_DIRECTION,
            DIRECTION_LABELS,
            horizontal=True,
            help="PC1 of the calibration displacements (no labels needed; its sign is arbitrary) or the "
            "normalized difference of the memorized and grounded class means (CRM eq. 2).",
        )
        or PC1
    )


def flag_meaning(lts: Any, mu: Any, flagged: list[int], audited: int) -> str:
    """One sentence: what the flagged layers do and do not mean for this example."""
    if not flagged:
        return (
            f"No layer of {audited} is outside the calibration band: the context moved this prompt's hidden state "
            "about as much as it moved the calibration prompts'. That is not evidence either way about recall."
        )
    above = sum(float(lts[r]) > float(mu[r]) for r in flagged)
    how = "further than" if above * 2 >= len(flagged) else "less far than"
    return (
        f"For this example, {len(flagged)} of {audited} layers moved {how} 95% of the calibration prompts did: "
        "the context changed the model's internal state unusually there. It does not say the answer was recalled "
        "or read, nor that the fact is stored in those layers — the detectors on the Dual Path page give verdicts."
    )


def draw_trajectory(internals: Internals, basis: CrmBasis, direction: str) -> None:
    st.subheader("Latent trajectory shift at the last prompt token")
    d0 = internals.displacement[:, 0]
    lts, flagged = run_lts(internals, basis, direction)
    metrics = (  # label, value, help
        (
            "Layers outside μ ± 2σ",
            f"{len(flagged)} of {len(basis.audited_layers)}",
            "CRM's audit rule: |LTS_ℓ − μ_ℓ| > 2σ_ℓ against the calibration prompts.",
        ),
        ("Anomaly score", f"{basis.anomaly_score(lts, direction):.2f}", "Mean |LTS_ℓ − μ_ℓ| / σ_ℓ over the layers."),
        (
            "CRM-LR P(memorized)",
            f"{basis.lr_probability(basis.lts(d0, PC1)):.2f}",
            "Logistic regression on the kept-layer PC1 LTS, fitted on all calibration prompts.",
        ),
        (
            "Supervised z-score (crm_lts)",
            f"{supervised_score(basis, basis.lts(d0, SUPERVISED)):+.2f}",
            "Mean over layers of the standardized supervised-direction LTS; higher = more memorized-like.",
        ),
    )
    for column, (label, value, help_text) in zip(st.columns(len(metrics)), metrics):
        column.metric(label, value, help=help_text)
    st.plotly_chart(run_lts_figure(internals, basis, direction), key=keys.scoped(keys.TRAJ_LTS, direction))
    if flagged:
        st.markdown(f"Flagged (outside μ ± 2σ): {row_names(flagged)}")  # indices, not a count
    st.info(flag_meaning(lts, basis.mu[direction], flagged, len(basis.audited_layers)))
    st.caption(
        "Grey band: the calibration prompts' μ ± 2σ per layer; shaded columns: layers kept by the variance-ratio "
        "rule; thin lines: calibration means of each class. A point outside the band says this prompt moved the "
        "hidden state unusually along v_ℓ compared with the calibration set — the band is calibrated on our "
        "bundled prompts and may not transfer to other domains (CRM appendix V.3)."
        + (
            " The sign of PC1 is arbitrary (fixed here so the calibration mean is positive)."
            if direction == PC1
            else ""
        )
    )


def draw_baselines(internals: Internals) -> None:
    st.subheader("Baselines on the same layer axis")
    st.plotly_chart(run_baselines_figure(internals), key=keys.TRAJ_BASELINES)
    st.caption(
        "‖d_ℓ‖ measures how far the context moves the state in any direction (CRM appendix E's magnitude "
        "baseline: it grows with depth as the residual stream does); the logit-lens KL reads each layer through "
        "the final norm and unembedding and compares the two paths' next-token distributions (appendix F). "
        "Neither says which layer encodes the source; they bound what the direction adds."
    )


def draw_positions(internals: Internals, basis: CrmBasis | None, direction: str, result: DualPathResult) -> None:
    st.subheader("Every answer position")
    options = list(QUANTITIES) if basis is not None else ["l2", "lens"]
    quantity = st.radio(
        "Quantity", options, format_func=QUANTITIES.__getitem__, horizontal=True, key=keys.TRAJ_QUANTITY
    )
    fig = positions_figure(internals, result.answer_tokens, quantity, basis, direction)
    st.plotly_chart(fig, key=keys.scoped(keys.TRAJ_POSITIONS, quantity, direction))
    st.caption(
        "Column t compares the two paths at the step that predicts answer token t (both teacher-forced on the "
        "retrieval answer). The directions are calibrated at the last prompt token only, so LTS at later "
        "positions is an extrapolation."
    )


def draw_classifier(basis: CrmBasis) -> None:
    st.subheader("How separable the calibration classes are for this model")
    report = basis.classifier
    sets = report.get("feature_sets") or {}
    if not sets:
        st.info("This calibration has no classifier report.")
        return
    main = sets.get(PC1)
    best = sets.get(f"{SUPERVISED}_all_layers")
    c1, c2 = st.columns(2)
    if main:
        c1.metric(
            "CRM-LR AUC (PC1, kept layers)",
            f"{main['auc']:.3f}",
            help=f"95% CI {main['ci95'][0]:.3f}–{main['ci95'][1]:.3f}",
        )
        c1.caption(f"95% bootstrap CI [{main['ci95'][0]:.3f}, {main['ci95'][1]:.3f}]")
    if best:
        c2.metric("Supervised direction, all layers", f"{best['auc']:.3f}")
        c2.caption(f"95% bootstrap CI [{best['ci95'][0]:.3f}, {best['ci95'][1]:.3f}]")
    st.dataframe(classifier_frame(report), hide_index=True)
    st.caption(
        f"{report.get('protocol', '')} n = {report.get('n')} ({report.get('n_memorized')} memorized-style, "
        f"{report.get('n_grounded')} grounded). The classes are a membership proxy built for this tool — famous "
        "facts vs invented entities — so a high AUC can partly reflect topic and vocabulary differences (the "
        "confound CRM's MIMIR control warns about); it describes this model on these prompts, not a guarantee."
    )


def draw_export(internals: Internals, basis: CrmBasis | None, result: DualPathResult) -> None:
    st.subheader("Export")
    d0 = internals.displacement[:, 0]
    lts = {name: basis.lts(d0, name) for name in DIRECTIONS} if basis is not None else {}
    flagged = {name: basis.flagged(lts[name], name) for name in lts} if basis is not None else {}
    table = layer_table(
        lts,
        internals.disp_norm[:, 0],
        internals.lens.kl[:, 0],
        kept=basis.kept_layers if basis is not None else [],
        flagged=flagged,
        evr=basis.selection_ratio if basis is not None else None,
    )
    payload = {
        "model": result.model,
        "query": result.query,
        "internals": internals.summary(),
        "crm": crm_report(basis, internals.displacement),
    }
    c1, c2 = st.columns(2)
    csv = table.to_csv(index=False)
    widgets.download(c1, "Download per-layer table (CSV)", csv, "layer_trajectories.csv", key=keys.TRAJ_CSV)
    data = json.dumps(payload, indent=1, allow_nan=False, default=float)
    widgets.download(c2, "Download trajectories (JSON)", data, "layer_trajectories.json", key=keys.TRAJ_JSON)
    with st.expander("Per-layer values"):
        st.dataframe(table, hide_index=True)


def draw_view(handle: ModelHandle, result: DualPathResult, internals: Internals) -> None:
    """The page's sections on the session's last run and its analysis."""
    basis = draw_basis(handle, result)
    direction = draw_direction()
    st.divider()
    if basis is not None:
        draw_trajectory(internals, basis, direction)
        st.divider()
    draw_baselines(internals)
    st.divider()
    draw_positions(internals, basis, direction, result)
    if basis is not None:
        st.divider()
        draw_classifier(basis)
    st.divider()
    draw_redeep(handle, result)
    st.divider()
    draw_export(internals, basis, result)


views.run_view("Layer trajectories", draw_view)
