"""Every chart a page draws of one run, by name: the notebook's ``run.figure(name)``.

Each entry computes what its page computes (through :mod:`core`: the internals analysis, the Lookback Lens map, RADAR's
forward, ReDeEP's forward, a Self-Critique or SMA run) and hands it to the **same** figure function the page calls —
the streamlit-free builders of ``components/*_figures.py`` (for example
:func:`figures.attention.entropy_map_figure`, which the Attention page draws too). So a figure here and
its page's figure are one plotly figure built by one function; nothing here imports Streamlit.

What a run's analyses cost is remembered on the :class:`~read_or_recall.run.Run` (the internals are computed once for
every internals figure). The ablations' and the evaluation's figures belong to their own objects
(:meth:`read_or_recall.Ablation.figure`, :meth:`read_or_recall.Evaluation.figure`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from read_or_recall.run import Run

FREE, FORWARD, GENERATE = "free", "forward", "generate"
"""What a figure costs beyond the run: nothing, forward passes of the model, or new generations."""


@dataclass(frozen=True)
class FigureSpec:
    """One chart of one run.

    Attributes:
        name: the name ``run.figure`` takes.
        page: the page that draws it.
        what: one sentence: what the chart shows.
        cost: :data:`FREE`, :data:`FORWARD` or :data:`GENERATE` (what it runs the first time, remembered after).
        options: the keyword options it takes, with their defaults (as text, for :func:`describe`).
        build: ``build(run, **options) -> plotly Figure``.
    """

    name: str
    page: str
    what: str
    cost: str
    options: str
    build: Callable[..., go.Figure]


# ---------------------------------------------------------------------------------------------------------------
# Dual Path


def _kl(run: Run) -> go.Figure:
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


def _entropy(run: Run, path: str = "retrieval", where: int | str = 0, tau: float | None = None) -> go.Figure:
    from core.methods.internals import RADAR_TAU
    from figures.attention import entropy_map_figure

    return entropy_map_figure(run.internals(), _path(path), _where(run, where), RADAR_TAU if tau is None else tau)


def _entropy_diff(run: Run, where: int | str = 0) -> go.Figure:
    from figures.attention import entropy_diff_figure

    return entropy_diff_figure(run.internals(), _where(run, where))


def _mass(run: Run, where: int | str = 0) -> go.Figure:
    from figures.attention import context_mass_figure

    return context_mass_figure(run.internals(), _where(run, where))


def _head(run: Run, layer: int = 0, head: int = 0, path: str = "retrieval", all_rows: bool = False) -> go.Figure:
    from core.methods.internals import attention_pattern, path_sequence
    from figures.attention import head_pattern_figure

    info = run.lab.handle.info
    if not (0 <= int(layer) < info.n_layers and 0 <= int(head) < info.n_heads):
        raise ValueError(f"layer must be 0…{info.n_layers - 1} and head 0…{info.n_heads - 1}, got {layer}, {head}")
    key = ("head", _path(path), int(layer), int(head))
    if key not in run._cache:
        ids, tokens, _ = path_sequence(run.lab.handle, run.result, path)
        run._cache[key] = (attention_pattern(run.lab.handle, ids, int(layer), int(head)), tokens)
    pattern, tokens = run._cache[key]
    return head_pattern_figure(pattern, tokens, run.internals().rows(path), int(layer), int(head), all_rows=all_rows)


def _lookback_map(run: Run) -> go.Figure:
    from figures.attention import lookback_figures

    return lookback_figures(run.lookback())[0]


def _lookback_curve(run: Run) -> go.Figure:
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


def _lts(run: Run, direction: str = "pc1") -> go.Figure:
    from figures.trajectory import run_lts_figure

    return run_lts_figure(run.internals(), run.crm_basis(required=True), _direction(direction))


def _baselines(run: Run) -> go.Figure:
    from figures.trajectory import run_baselines_figure

    return run_baselines_figure(run.internals())


def _positions(run: Run, quantity: str = "lens", direction: str = "pc1") -> go.Figure:
    from figures.trajectory import positions_figure

    basis = run.crm_basis(required=quantity == "lts")
    return positions_figure(run.internals(), run.result.answer_tokens, quantity, basis, _direction(direction))


def _lens(run: Run, position: int | None = None) -> go.Figure:
    from figures.base import default_position
    from figures.vocabulary import lens_position_figure

    t = default_position(run.result.token_kl) if position is None else int(position)
    return lens_position_figure(run.internals(), t, run.result.answer_tokens)


def _redeep(run: Run) -> go.Figure:
    from figures.redeep import token_figure

    return token_figure(run.redeep())


# ---------------------------------------------------------------------------------------------------------------
# RADAR


def _radar_probability(run: Run, source: str = "query") -> go.Figure:
    from figures.radar import probability_figure

    analysis = run.radar(source)
    if analysis.prediction is None:
        raise ValueError("RADAR has no classifier for this model yet (its features of the bundled sets are missing).")
    return probability_figure(analysis.prediction)


def _radar_trajectory(run: Run, source: str = "query") -> go.Figure:
    from figures.radar import trajectory_figure

    return trajectory_figure(run.radar(source).trace)


def _radar_heads(run: Run, source: str = "query") -> go.Figure:
    from figures.radar import head_entropy_figure

    return head_entropy_figure(run.radar(source).trace)


def _radar_accuracy(run: Run) -> go.Figure:
    from figures.radar import accuracy_figure

    return accuracy_figure(run.radar_report())


def _radar_scatter(run: Run, source: str = "query") -> go.Figure:
    from figures.radar import rds_rci_figure

    report = run.radar_report()
    prediction = run.radar(source).prediction
    current = None if prediction is None else (prediction.rds, prediction.rci)
    return rds_rci_figure(report["rows"], current)


# ---------------------------------------------------------------------------------------------------------------
# Self-Critique and source attribution (SMA): new generations, with the method's own settings


def _self_critique(run: Run, k: int | None = None, **settings: Any) -> go.Figure:
    from figures.detectors import entropy_sequences_figure

    result = run.self_critique(**settings)
    e1, e2 = result.entropies(k)
    return entropy_sequences_figure(result.first_tokens, e1, result.critique_tokens, e2, k=k)


def _sma_labels(result: Any, labels: dict[str, Any] | None) -> list[str]:
    return result.labels(**(labels or {}))


def _sma_text(run: Run, value: str = "ads", labels: dict[str, Any] | None = None, **settings: Any) -> go.Figure:
    from figures.detectors import ads_text_figure

    if value not in ("ads", "beta_on", "beta_off"):
        raise ValueError(f"value must be 'ads', 'beta_on' or 'beta_off', got {value!r}")
    result = run.sma(**settings)
    return ads_text_figure(result, _sma_labels(result, labels), value=value)


def _sma_bars(run: Run, labels: dict[str, Any] | None = None, **settings: Any) -> go.Figure:
    from core.methods.sma.maths import DEFAULT_TAU1, DEFAULT_TAU2
    from figures.detectors import ads_bar_figure

    result = run.sma(**settings)
    chosen = labels or {}
    return ads_bar_figure(
        result,
        _sma_labels(result, labels),
        tau1=chosen.get("tau1", DEFAULT_TAU1),
        tau2=chosen.get("tau2", DEFAULT_TAU2),
    )


def _sma_ablation(run: Run, **settings: Any) -> go.Figure:
    from figures.detectors import context_ablation_figure

    return context_ablation_figure(run.context_ablation(**settings))


_SPECS = (
    FigureSpec("kl", "Dual Path", "per-token KL between the paths with both paths' entropies", FREE, "", _kl),
    FigureSpec(
        "attention_entropy",
        "Attention",
        "attention entropy per layer and head on one path, specialized heads marked",
        FORWARD,
        "path='retrieval', where=0 (an answer position or 'mean'), tau=1.5",
        _entropy,
    ),
    FigureSpec(
        "attention_entropy_diff",
        "Attention",
        "entropy(retrieval) − entropy(parametric) per layer and head",
        FORWARD,
        "where=0",
        _entropy_diff,
    ),
    FigureSpec(
        "attention_context_mass",
        "Attention",
        "the share of the retrieval path's attention on the context, per layer and head",
        FORWARD,
        "where=0",
        _mass,
    ),
    FigureSpec(
        "attention_head",
        "Attention",
        "one head's attention pattern",
        FORWARD,
        "layer=0, head=0, path='retrieval', all_rows=False",
        _head,
    ),
    FigureSpec(
        "lookback_map", "Attention", "the Lookback Lens ratio per head and answer token", FORWARD, "", _lookback_map
    ),
    FigureSpec(
        "lookback_curve",
        "Attention",
        "the mean lookback ratio over 8-token windows (with the classifier's P(recalled))",
        FORWARD,
        "",
        _lookback_curve,
    ),
    FigureSpec(
        "lts",
        "Layer trajectories",
        "CRM's latent trajectory shift per layer at the last prompt token, with the calibration band",
        FORWARD,
        "direction='pc1' or 'supervised'",
        _lts,
    ),
    FigureSpec(
        "trajectory_baselines",
        "Layer trajectories",
        "‖d_ℓ‖ and the logit-lens KL per layer at the last prompt token",
        FORWARD,
        "",
        _baselines,
    ),
    FigureSpec(
        "trajectory_positions",
        "Layer trajectories",
        "a layer × answer-position heatmap of LTS, ‖d_ℓ‖ or the logit-lens KL",
        FORWARD,
        "quantity='lens' ('lts', 'l2'), direction='pc1'",
        _positions,
    ),
    FigureSpec(
        "logit_lens",
        "Vocabulary lens",
        "the logit-lens probability of one answer token on both paths and the lens KL, layer by layer",
        FORWARD,
        "position=None (the largest KL)",
        _lens,
    ),
    FigureSpec(
        "redeep",
        "Layer trajectories",
        "ReDeEP's ECS (read) and PKS (recall) per answer token next to the KL",
        FORWARD,
        "",
        _redeep,
    ),
    FigureSpec(
        "radar_probability",
        "RADAR",
        "each classifier's P(recall) and the soft vote",
        FORWARD,
        "source='query' or 'context'",
        _radar_probability,
    ),
    FigureSpec(
        "radar_trajectory",
        "RADAR",
        "logit-lens confidence and entropy across layers",
        FORWARD,
        "source='query'",
        _radar_trajectory,
    ),
    FigureSpec("radar_heads", "RADAR", "attention entropy per layer and head", FORWARD, "source='query'", _radar_heads),
    FigureSpec(
        "radar_accuracy",
        "RADAR",
        "accuracy on the bundled test set beside the paper's Table 1",
        FREE,
        "",
        _radar_accuracy,
    ),
    FigureSpec(
        "radar_rds_rci",
        "RADAR",
        "RDS against RCI of the test prompts and this one",
        FORWARD,
        "source='query'",
        _radar_scatter,
    ),
    FigureSpec(
        "self_critique",
        "Self-Critique",
        "the token entropies of the first and the critique answer",
        GENERATE,
        "k=None, and SelfCritiqueSettings fields",
        _self_critique,
    ),
    FigureSpec(
        "sma_text",
        "Source attribution",
        "the input text colored by ADS (or β)",
        GENERATE,
        "value='ads', labels=None (tau, tau1, tau2, first_tier), and SMASettings fields",
        _sma_text,
    ),
    FigureSpec(
        "sma_bars",
        "Source attribution",
        "ADS per input unit with the non-member band",
        GENERATE,
        "labels=None, and SMASettings fields",
        _sma_bars,
    ),
    FigureSpec(
        "sma_context_ablation",
        "Source attribution",
        "the answer's change when each context sentence is left out",
        GENERATE,
        "SMASettings fields",
        _sma_ablation,
    ),
)

FIGURES: dict[str, FigureSpec] = {spec.name: spec for spec in _SPECS}
"""Every chart of one run by name (``run.figure(name)``), in page order."""


def figure_names(cost: str | None = None) -> list[str]:
    """The names of :data:`FIGURES`, only those of one ``cost`` when given."""
    return [name for name, spec in FIGURES.items() if cost is None or spec.cost == cost]


def describe() -> list[dict[str, str]]:
    """Every figure as plain data: name, page, what it shows, cost and options (a table for a notebook)."""
    return [
        {"name": s.name, "page": s.page, "what": s.what, "cost": s.cost, "options": s.options} for s in FIGURES.values()
    ]


def build(run: Run, name: str, **options: Any) -> go.Figure:
    """The figure ``name`` of ``run``.

    Raises:
        ValueError: an unknown name (the message lists them) or a bad option.
    """
    spec = FIGURES.get(name)
    if spec is None:
        raise ValueError(f"Unknown figure {name!r}; the figures of a run are: {', '.join(FIGURES)}.")
    return spec.build(run, **options)
