"""The one figure registry of the notebook API: every chart a page draws, by the result it belongs to and its name.

``run.figure(name)`` draws a run's charts; every other result draws its own (``ablation.figure("kl_compare")``,
``sweep.figure()``, ``evaluation.figure("roc")``, ``critique.figure("entropies")`` …) — all through :func:`build`,
from :data:`FIGURES`. Each entry computes what its page computes (through :mod:`core`: the internals analysis, the
Lookback Lens map, RADAR's forward, ReDeEP's forward) and hands it to the **same** figure function the page calls —
the streamlit-free builders of the :mod:`figures` package (for example :func:`figures.attention.entropy_map_figure`,
which the Attention page draws too). Nothing here imports Streamlit.

What a run's analyses cost is remembered on the :class:`~read_or_recall.run.Run` and listed by
:meth:`~read_or_recall.run.Run.computed` (the internals are computed once for every internals figure).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from read_or_recall import builders as b

if TYPE_CHECKING:
    import plotly.graph_objects as go


FREE, FORWARD, GENERATE = "free", "forward", "generate"
"""What a figure costs beyond the run: nothing, forward passes of the model, or new generations."""


@dataclass(frozen=True)
class FigureSpec:
    """One chart of one kind of result.

    Attributes:
        name: the name ``result.figure`` takes.
        of: the result type it belongs to (``"Run"``, ``"Ablation"``, ``"NoiseSweep"``, ``"Evaluation"``, …).
        page: the page that draws it.
        what: one sentence: what the chart shows.
        cost: :data:`FREE`, :data:`FORWARD` or :data:`GENERATE` (what it runs the first time, remembered after).
        options: the keyword options it takes, with their defaults (as text, for :func:`describe`).
        build: ``build(result, **options) -> plotly Figure``.
    """

    name: str
    of: str
    page: str
    what: str
    cost: str
    options: str
    build: Callable[..., go.Figure]


_SPECS = (
    FigureSpec("kl", "Run", "Dual Path", "per-token KL between the paths with both paths' entropies", FREE, "", b.kl),
    FigureSpec(
        "attention_entropy",
        "Run",
        "Attention",
        "attention entropy per layer and head on one path, specialized heads marked",
        FORWARD,
        "path='retrieval', where=0 (an answer position or 'mean'), tau=1.5",
        b.entropy,
    ),
    FigureSpec(
        "attention_entropy_diff",
        "Run",
        "Attention",
        "entropy(retrieval) − entropy(parametric) per layer and head",
        FORWARD,
        "where=0",
        b.entropy_diff,
    ),
    FigureSpec(
        "attention_context_mass",
        "Run",
        "Attention",
        "the share of the retrieval path's attention on the context, per layer and head",
        FORWARD,
        "where=0",
        b.mass,
    ),
    FigureSpec(
        "attention_head",
        "Run",
        "Attention",
        "one head's attention pattern",
        FORWARD,
        "layer=0, head=0, path='retrieval', all_rows=False",
        b.head,
    ),
    FigureSpec(
        "lookback_map",
        "Run",
        "Attention",
        "the Lookback Lens ratio per head and answer token",
        FORWARD,
        "",
        b.lookback_map,
    ),
    FigureSpec(
        "lookback_curve",
        "Run",
        "Attention",
        "the mean lookback ratio over 8-token windows (with the classifier's P(recalled))",
        FORWARD,
        "",
        b.lookback_curve,
    ),
    FigureSpec(
        "lts",
        "Run",
        "Layer trajectories",
        "CRM's latent trajectory shift per layer at the last prompt token, with the calibration band",
        FORWARD,
        "direction='pc1' or 'supervised'",
        b.lts,
    ),
    FigureSpec(
        "trajectory_baselines",
        "Run",
        "Layer trajectories",
        "‖d_ℓ‖ and the logit-lens KL per layer at the last prompt token",
        FORWARD,
        "",
        b.baselines,
    ),
    FigureSpec(
        "trajectory_positions",
        "Run",
        "Layer trajectories",
        "a layer × answer-position heatmap of LTS, ‖d_ℓ‖ or the logit-lens KL",
        FORWARD,
        "quantity='lens' ('lts', 'l2'), direction='pc1'",
        b.positions,
    ),
    FigureSpec(
        "logit_lens",
        "Run",
        "Vocabulary lens",
        "the logit-lens probability of one answer token on both paths and the lens KL, layer by layer",
        FORWARD,
        "position=None (the largest KL)",
        b.lens,
    ),
    FigureSpec(
        "redeep",
        "Run",
        "Layer trajectories",
        "ReDeEP's ECS (read) and PKS (recall) per answer token next to the KL",
        FORWARD,
        "",
        b.redeep,
    ),
    FigureSpec(
        "radar_probability",
        "Run",
        "RADAR",
        "each classifier's P(recall) and the soft vote",
        FORWARD,
        "source='query' or 'context'",
        b.radar_probability,
    ),
    FigureSpec(
        "radar_trajectory",
        "Run",
        "RADAR",
        "logit-lens confidence and entropy across layers",
        FORWARD,
        "source='query'",
        b.radar_trajectory,
    ),
    FigureSpec(
        "radar_heads", "Run", "RADAR", "attention entropy per layer and head", FORWARD, "source='query'", b.radar_heads
    ),
    FigureSpec(
        "radar_accuracy",
        "Run",
        "RADAR",
        "accuracy on the bundled test set beside the paper's Table 1",
        FREE,
        "",
        b.radar_accuracy,
    ),
    FigureSpec(
        "radar_rds_rci",
        "Run",
        "RADAR",
        "RDS against RCI of the test prompts and this one",
        FORWARD,
        "source='query'",
        b.radar_scatter,
    ),
    FigureSpec(
        "entropies",
        "SelfCritique",
        "Self-Critique",
        "the token entropies of the first and the critique answer",
        FREE,
        "k=None (top-k entropies; None: the full vocabulary)",
        b.self_critique,
    ),
    FigureSpec(
        "text",
        "SourceAttribution",
        "Source attribution",
        "the input text colored by ADS (or β)",
        FREE,
        "value='ads' ('beta_on', 'beta_off'), labels=None (tau, tau1, tau2, first_tier)",
        b.sma_text,
    ),
    FigureSpec(
        "bars",
        "SourceAttribution",
        "Source attribution",
        "ADS per input unit with the non-member band",
        FREE,
        "labels=None (tau, tau1, tau2, first_tier)",
        b.sma_bars,
    ),
    FigureSpec(
        "ablation",
        "ContextAblation",
        "Source attribution",
        "the answer's change when each context sentence is left out",
        FREE,
        "",
        b.context_ablation,
    ),
    FigureSpec(
        "kl_compare", "Ablation", "Ablations", "KL per answer token, clean vs perturbed", FREE, "", b.kl_compare
    ),
    FigureSpec(
        "token_diff",
        "Ablation",
        "Ablations",
        "the perturbed answer with its changed tokens marked",
        FREE,
        "path='retrieval' or 'parametric'",
        b.token_diff,
    ),
    FigureSpec(
        "trajectory",
        "Ablation",
        "Ablations",
        "the per-layer trajectory at the last prompt token, clean vs perturbed",
        FREE,
        "",
        b.trajectory,
    ),
    FigureSpec(
        "dose_response",
        "NoiseSweep",
        "Ablations",
        "Z and log P(first token) against ε",
        FREE,
        "",
        b.sweep("dose_response"),
    ),
    FigureSpec(
        "layer_sweep", "NoiseSweep", "Ablations", "ΔZ per single noised layer", FREE, "", b.sweep("layer_sweep")
    ),
    FigureSpec(
        "roc",
        "Evaluation",
        "Evaluate",
        "each detector's ROC curve with its AUC (the best few drawn, the rest one legend click away)",
        FREE,
        "shown=5 (None: every curve)",
        b.roc,
    ),
    FigureSpec("robustness", "Evaluation", "Evaluate", "RePCS' AUC per logit-noise σ", FREE, "", b.robustness),
)


FIGURES: dict[tuple[str, str], FigureSpec] = {(spec.of, spec.name): spec for spec in _SPECS}
"""Every chart by ``(result type, name)``, in page order."""


def figure_names(of: str = "Run", cost: str | None = None) -> list[str]:
    """The chart names of the result type ``of`` (default: a run's), only those of one ``cost`` when given."""
    return [s.name for s in FIGURES.values() if s.of == of and (cost is None or s.cost == cost)]


def describe() -> list[dict[str, str]]:
    """Every chart as plain data: the result it belongs to, name, page, what it shows, cost and options."""
    return [
        {"of": s.of, "name": s.name, "page": s.page, "what": s.what, "cost": s.cost, "options": s.options}
        for s in FIGURES.values()
    ]


def build(result: Any, name: str | None = None, **options: Any) -> go.Figure:
    """The chart ``name`` of ``result`` (a run or another result of the API; default: its first chart).

    Raises:
        ValueError: an unknown name (the message lists the result's charts), a result with no charts, or a bad
            option.
    """
    of = type(result).__name__
    names = figure_names(of)
    if not names:
        raise ValueError(f"A {of} has no charts.")
    spec = FIGURES.get((of, name or names[0]))
    if spec is None:
        raise ValueError(f"Unknown figure {name!r} of a {of}; its figures are: {', '.join(names)}.")
    return spec.build(result, **options)
