"""The builders of :mod:`read_or_recall.registry`: each computes what its page computes (through :mod:`core`) and
hands it to the same figure function the page calls (the :mod:`figures` package). ``build(result, **options)``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from read_or_recall.results import (
        Ablation,
        ContextAblation,
        Evaluation,
        NoiseSweep,
        SelfCritique,
        SourceAttribution,
    )
    from read_or_recall.run import Run


# ---------------------------------------------------------------------------------------------------------------
# Dual Path


def kl(run: Run) -> go.Figure:
    from figures.base import kl_entropy_figure_for

    return kl_entropy_figure_for(run.result)


# ---------------------------------------------------------------------------------------------------------------
# Attention


def _where(run: Run, where: int | str) -> int | str:
    if where == "mean":
        return "mean"
    internals = run.internals()
    if isinstance(where, bool) or not isinstance(where, int) or not 0 <= where < internals.n_positions:
        raise ValueError(f"where must be 'mean' or an answer position 0…{internals.n_positions - 1}, got {where!r}")
    return where


def _path(path: str) -> str:
    if path not in ("retrieval", "parametric"):
        raise ValueError(f"path must be 'retrieval' or 'parametric', got {path!r}")
    return path


def entropy(run: Run, path: str = "retrieval", where: int | str = 0, tau: float | None = None) -> go.Figure:
    from core.methods.internals import RADAR_TAU
    from figures.attention import entropy_map_figure

    return entropy_map_figure(run.internals(), _path(path), _where(run, where), RADAR_TAU if tau is None else tau)


def entropy_diff(run: Run, where: int | str = 0) -> go.Figure:
    from figures.attention import entropy_diff_figure

    return entropy_diff_figure(run.internals(), _where(run, where))


def mass(run: Run, where: int | str = 0) -> go.Figure:
    from figures.attention import context_mass_figure

    return context_mass_figure(run.internals(), _where(run, where))


def head(run: Run, layer: int = 0, head: int = 0, path: str = "retrieval", all_rows: bool = False) -> go.Figure:
    from figures.attention import head_pattern_figure

    pattern, tokens = run.attention_pattern(int(layer), int(head), _path(path))
    return head_pattern_figure(pattern, tokens, run.internals().rows(path), int(layer), int(head), all_rows=all_rows)


def lookback_map(run: Run) -> go.Figure:
    from figures.attention import lookback_figures

    return lookback_figures(run.lookback())[0]


def lookback_curve(run: Run) -> go.Figure:
    from figures.attention import lookback_figures

    curve = lookback_figures(run.lookback())[1]
    if curve is None:
        raise ValueError("The answer is too short for a Lookback Lens window: there is no curve (the map has it all).")
    return curve


# ---------------------------------------------------------------------------------------------------------------
# Layer trajectories and the Vocabulary lens


def _direction(direction: str) -> str:
    from core.methods.crm import DIRECTIONS

    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {list(DIRECTIONS)}, got {direction!r}")
    return direction


def lts(run: Run, direction: str = "pc1") -> go.Figure:
    from figures.trajectory import run_lts_figure

    return run_lts_figure(run.internals(), run.crm_basis(required=True), _direction(direction))


def baselines(run: Run) -> go.Figure:
    from figures.trajectory import run_baselines_figure

    return run_baselines_figure(run.internals())


def positions(run: Run, quantity: str = "lens", direction: str = "pc1") -> go.Figure:
    from figures.trajectory import positions_figure

    basis = run.crm_basis(required=quantity == "lts")
    return positions_figure(run.internals(), run.result.answer_tokens, quantity, basis, _direction(direction))


def lens(run: Run, position: int | None = None) -> go.Figure:
    from figures.base import default_position
    from figures.vocabulary import lens_position_figure

    t = default_position(run.result.token_kl) if position is None else int(position)
    return lens_position_figure(run.internals(), t, run.result.answer_tokens)


def redeep(run: Run) -> go.Figure:
    from figures.redeep import token_figure

    return token_figure(run.redeep())


# ---------------------------------------------------------------------------------------------------------------
# RADAR


def radar_probability(run: Run, source: str = "query") -> go.Figure:
    from figures.radar import probability_figure

    analysis = run.radar(source)
    if analysis.prediction is None:
        raise ValueError("RADAR has no classifier for this model yet (its features of the bundled sets are missing).")
    return probability_figure(analysis.prediction)


def radar_trajectory(run: Run, source: str = "query") -> go.Figure:
    from figures.radar import trajectory_figure

    return trajectory_figure(run.radar(source).trace)


def radar_heads(run: Run, source: str = "query") -> go.Figure:
    from figures.radar import head_entropy_figure

    return head_entropy_figure(run.radar(source).trace)


def radar_accuracy(run: Run) -> go.Figure:
    from figures.radar import accuracy_figure

    return accuracy_figure(run.radar_report())


def radar_scatter(run: Run, source: str = "query") -> go.Figure:
    from figures.radar import rds_rci_figure

    report = run.radar_report()
    prediction = run.radar(source).prediction
    current = None if prediction is None else (prediction.rds, prediction.rci)
    return rds_rci_figure(report["rows"], current)


# ---------------------------------------------------------------------------------------------------------------
# Self-Critique and source attribution (SMA): charts of their own results


def self_critique(critique: SelfCritique, k: int | None = None) -> go.Figure:
    from figures.detectors import entropy_sequences_figure

    a = critique.analysis
    e1, e2 = a.entropies(k)
    return entropy_sequences_figure(a.first_tokens, e1, a.critique_tokens, e2, k=k)


def sma_text(sma: SourceAttribution, value: str = "ads", labels: dict[str, Any] | None = None) -> go.Figure:
    from figures.detectors import ads_text_figure

    if value not in ("ads", "beta_on", "beta_off"):
        raise ValueError(f"value must be 'ads', 'beta_on' or 'beta_off', got {value!r}")
    return ads_text_figure(sma.analysis, sma.analysis.labels(**(labels or {})), value=value)


def sma_bars(sma: SourceAttribution, labels: dict[str, Any] | None = None) -> go.Figure:
    from core.methods.sma.maths import DEFAULT_TAU1, DEFAULT_TAU2
    from figures.detectors import ads_bar_figure

    chosen = labels or {}
    return ads_bar_figure(
        sma.analysis,
        sma.analysis.labels(**chosen),
        tau1=chosen.get("tau1", DEFAULT_TAU1),
        tau2=chosen.get("tau2", DEFAULT_TAU2),
    )


def context_ablation(ablation: ContextAblation) -> go.Figure:
    from figures.detectors import context_ablation_figure

    return context_ablation_figure(ablation.analysis)


# ---------------------------------------------------------------------------------------------------------------
# Ablations and the evaluation


def kl_compare(a: Ablation) -> go.Figure:
    from figures.ablation import kl_compare_figure

    clean, new = a.clean.result, a.perturbed.result
    return kl_compare_figure(clean.answer_tokens, clean.token_kl, new.answer_tokens, new.token_kl, clean.score_window)


def token_diff(a: Ablation, path: str = "retrieval") -> go.Figure:
    from figures.ablation import token_diff_figure

    changed = a.comparison["rag_changed" if _path(path) == "retrieval" else "parametric_changed"]
    return token_diff_figure(a.perturbed.result.path(path).tokens, changed, a.clean.result.path(path).tokens)


def trajectory(a: Ablation) -> go.Figure:
    from core.methods.ablation import Trajectory
    from figures.ablation import trajectory_figure

    traj = a.perturbed.result.extras.get("trajectory")
    if traj is None:
        raise ValueError("The perturbed run has no trajectory.")
    pert, base = Trajectory.from_dict(traj), a.clean_trajectory
    return trajectory_figure(base.values, pert.values, kind=base.kind, intervened=list(a.layers), flagged=base.flagged)


def sweep(kind: str) -> Callable[[NoiseSweep], go.Figure]:
    def build(sweep: NoiseSweep) -> go.Figure:
        from figures import ablation as figs

        if sweep.kind != kind:
            raise ValueError(f"This sweep is a {sweep.kind}: its chart is {sweep.kind!r}, not {kind!r}.")
        return figs.layer_sweep_figure(sweep.grid) if kind == "layer_sweep" else figs.dose_response_figure(sweep.grid)

    return build


def roc(ev: Evaluation, shown: int | None = 5) -> go.Figure:
    from figures.evaluate import roc_figure

    if not ev.report.get("detectors"):
        raise ValueError("No ROC without labels: evaluate a DataFrame with a label column.")
    return roc_figure(ev.report["detectors"], shown=shown)


def robustness(ev: Evaluation) -> go.Figure:
    from figures.evaluate import robustness_figure

    table = ev.report.get("robustness")
    if not table:
        raise ValueError("No robustness table: it needs labeled rows and noise σ values.")
    return robustness_figure(table)
