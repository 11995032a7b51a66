"""The named results of the notebook API: one type per verb, each drawn through the one figure registry.

Every verb of :class:`~read_or_recall.run.Run` and :class:`~read_or_recall.lab.Lab` returns one of these (or a
:class:`~read_or_recall.run.Run`). Each is a finished value: nothing a later call does changes it. Each has:

* ``figure(name, **options)`` — its charts, through :mod:`read_or_recall.registry` (``FIGURES`` lists their names;
  an empty tuple where it has none, e.g. :class:`SwapTest`);
* ``to_dict()`` — its numbers as plain JSON-ready data; ``to_frame()`` where it holds rows.

The engine's own object stays reachable (``.grid``, ``.test``, ``.result``, ``.report`` …) for everything else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from read_or_recall import registry

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go

    from core.engine.result import DualPathResult
    from core.engine.swap import SwapTest as EngineSwapTest
    from core.methods.ablation import NoiseGrid, Trajectory
    from core.methods.selfcritique import SelfCritiqueResult
    from core.methods.sma import ContextAblation as EngineContextAblation
    from core.methods.sma import SMAResult
    from read_or_recall.run import Run


class Result:
    """What every result shares: its charts by name, through the one registry."""

    FIGURES: ClassVar[tuple[str, ...]] = ()
    """The names :meth:`figure` draws (``rr.figures()`` lists them with what each shows)."""

    def figure(self, name: str | None = None, **options: Any) -> go.Figure:
        """The chart ``name`` of this result (default: its first), the same plotly figure its page draws.

        Raises:
            ValueError: an unknown name (the message lists this result's), an option out of range, or a result
                that has no charts.
        """
        return registry.build(self, name, **options)


def _frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------------------------
# One run under an intervention: the Ablations page


@dataclass(frozen=True, eq=False)
class Ablation(Result):
    """A clean run and the same inputs re-generated under noise or patching (:meth:`Run.ablate`).

    Attributes:
        clean, perturbed: the two :class:`~read_or_recall.run.Run` (each with its headline).
        layers: the decoder layers intervened on.
        comparison: what changed (:func:`core.methods.ablation.compare`: Z clean/perturbed, ΔZ, both verdicts
            — the headline's —, which tokens changed).
        clean_trajectory: the clean run's per-layer trajectory at the last prompt token.
    """

    FIGURES: ClassVar[tuple[str, ...]] = ("kl_compare", "token_diff", "trajectory")

    clean: Run
    perturbed: Run
    layers: tuple[int, ...]
    comparison: dict[str, Any]
    clean_trajectory: Trajectory

    @property
    def delta_z(self) -> float:
        """Z(perturbed) − Z(clean), nats."""
        return float(self.comparison["delta_z"])

    def to_dict(self) -> dict[str, Any]:
        """The layers, the comparison and both runs' JSON (as ``python -m core run --json`` writes a run)."""
        return {
            "layers": list(self.layers),
            "comparison": self.comparison,
            "clean": self.clean.to_dict(),
            "perturbed": self.perturbed.to_dict(),
        }

    def __repr__(self) -> str:
        c = self.comparison
        return (
            f"<Ablation layers {list(self.layers)}: Z {c['z_clean']:.3f} → {c['z_perturbed']:.3f} nats, "
            f"verdict {self.clean.verdict} → {self.perturbed.verdict}>"
        )


@dataclass(frozen=True, eq=False)
class NoiseSweep(Result):
    """Scoring runs under noise over a grid — ε values on one block of layers (:meth:`Run.dose_response`) or one
    layer at a time at a fixed ε (:meth:`Run.layer_sweep`) — with the clean reference.

    Attributes:
        grid: the engine's :class:`core.methods.ablation.NoiseGrid` (arrays of shape ``(conditions, seeds)``).
    """

    FIGURES: ClassVar[tuple[str, ...]] = ("dose_response", "layer_sweep")

    grid: NoiseGrid

    @property
    def kind(self) -> str:
        """``"dose_response"`` or ``"layer_sweep"`` (its one chart has the same name)."""
        return self.grid.kind

    def figure(self, name: str | None = None, **options: Any) -> go.Figure:
        """The Ablations page's chart of this sweep (``name``: default and only choice, :attr:`kind`)."""
        return registry.build(self, name or self.kind, **options)

    def to_dict(self) -> dict[str, Any]:
        return self.grid.to_dict()

    def to_frame(self) -> pd.DataFrame:
        """One row per condition (ε or layer) and seed: Z, ΔZ, log P(first clean token), answer changed, length."""
        g = self.grid
        return _frame(
            [
                {
                    "condition": g.conditions[i],
                    "seed": seed,
                    "z": float(g.z[i, j]),
                    "delta_z": float(g.delta_z[i, j]),
                    "first_token_logprob": float(g.first_token_logprob[i, j]),
                    "answer_changed": bool(g.answer_changed[i, j]),
                    "n_tokens": int(g.n_tokens[i, j]),
                    "answer": g.answers[i][j],
                }
                for i in range(len(g.conditions))
                for j, seed in enumerate(g.seeds)
            ]
        )

    def __repr__(self) -> str:
        return f"<NoiseSweep {self.kind}: {len(self.grid.conditions)} conditions × {len(self.grid.seeds)} seeds>"


# ---------------------------------------------------------------------------------------------------------------
# More generations on one run's inputs: swap test, Self-Critique, source attribution


@dataclass(frozen=True, eq=False)
class SwapTest(Result):
    """The swap test at a run's answer span (:meth:`Run.swap_test`): the span replaced in the context by an
    alternative, the retrieval path answered again. The run it was made on is not changed; this result carries the
    run's headline with the test joined (:attr:`axes`, :attr:`result`: what ``run --json --swap-test`` prints).

    Attributes:
        test: the engine's :class:`core.engine.swap.SwapTest` (``outcome``, ``reason``, ``trials`` …).
        result: the run's :class:`~core.engine.result.DualPathResult` with ``axes.swap_test`` (a copy).
    """

    test: EngineSwapTest
    result: DualPathResult

    @property
    def outcome(self) -> str:
        """``read`` (the answer follows the swap), ``recalled`` (keeps the original), ``neither`` or
        ``not applicable``."""
        return self.test.outcome

    @property
    def reason(self) -> str:
        return self.test.reason

    @property
    def axes(self) -> dict[str, Any]:
        """The run's headline with ``swap_test`` joined, as ``run --json --swap-test`` writes ``axes``."""
        return dict(self.result.axes or {})

    def to_dict(self) -> dict[str, Any]:
        return self.test.to_dict()

    def to_frame(self) -> pd.DataFrame:
        """One row per alternative tried, with its own outcome."""
        return _frame([t.to_dict() for t in self.test.trials])

    def __repr__(self) -> str:
        return f"<SwapTest {self.outcome!r}: {self.reason}>"


@dataclass(frozen=True, eq=False)
class SelfCritique(Result):
    """A Self-Critique run on a run's query and context (:meth:`Run.self_critique`).

    Attributes:
        analysis: the engine's :class:`core.methods.selfcritique.SelfCritiqueResult` (both answers, their
            entropies, the score).
    """

    FIGURES: ClassVar[tuple[str, ...]] = ("entropies",)

    analysis: SelfCritiqueResult

    def score(self, k: int | str | None = "default") -> float:
        """The penalized cosine of the two answers' top-k entropy sequences (the page's score)."""
        return float(self.analysis.score(k))

    def to_dict(self) -> dict[str, Any]:
        return self.analysis.to_dict()

    def __repr__(self) -> str:
        a = self.analysis
        return f"<SelfCritique score {self.score():.3f}: {a.first_answer!r} → {a.critique_answer!r}>"


@dataclass(frozen=True, eq=False)
class SourceAttribution(Result):
    """An SMA run (:meth:`Run.sma`): each input unit's attribution with the context on and off (ADS = β_on − β_off).

    Attributes:
        analysis: the engine's :class:`core.methods.sma.SMAResult`.
    """

    FIGURES: ClassVar[tuple[str, ...]] = ("text", "bars")

    analysis: SMAResult

    def to_dict(self) -> dict[str, Any]:
        return self.analysis.to_dict()

    def to_frame(self) -> pd.DataFrame:
        """One row per input unit: its text and segment, β with the context on and off, ADS and its label."""
        a = self.analysis
        labels = a.labels()
        return _frame(
            [
                {
                    **u.to_dict(),
                    "beta_on": float(a.beta_on[i]),
                    "beta_off": float(a.beta_off[i]),
                    "ads": float(a.ads[i]),
                    "label": labels[i],
                }
                for i, u in enumerate(a.units)
            ]
        )

    def __repr__(self) -> str:
        a = self.analysis
        return f"<SourceAttribution of {len(a.units)} units, membership {a.membership_score():.3f}>"


@dataclass(frozen=True, eq=False)
class ContextAblation(Result):
    """SMA's context ablation (:meth:`Run.context_ablation`): each context sentence left out in turn.

    Attributes:
        analysis: the engine's :class:`core.methods.sma.ContextAblation`.
    """

    FIGURES: ClassVar[tuple[str, ...]] = ("ablation",)

    analysis: EngineContextAblation

    def to_dict(self) -> dict[str, Any]:
        return self.analysis.to_dict()

    def to_frame(self) -> pd.DataFrame:
        """One row per context sentence left out: the sentence, the answer without it, its agreement with the full
        context's answer and how far that moved (``delta``)."""
        a = self.analysis
        return _frame(
            [
                {
                    "sentence": s,
                    "answer": a.answers[i],
                    "score": float(a.scores[i]),
                    "delta": float(a.delta[i]),
                    "similarity": float(a.similarities[i]),
                    "length_ratio": float(a.length_ratios[i]),
                }
                for i, s in enumerate(a.sentences)
            ]
        )

    def __repr__(self) -> str:
        return f"<ContextAblation of {len(self.analysis.sentences)} sentences>"


# ---------------------------------------------------------------------------------------------------------------
# The model over many inputs, and the model itself: evaluation, calibration


@dataclass(frozen=True, eq=False)
class Evaluation(Result):
    """The rows of :meth:`Lab.evaluate` and, on labeled data, each detector's metrics.

    Attributes:
        model: the model's name.
        report: the whole report, as ``python -m core evaluate`` writes it (``rows``, ``detectors``, ``robustness``).
    """

    FIGURES: ClassVar[tuple[str, ...]] = ("roc", "robustness")

    model: str
    report: dict[str, Any]

    @property
    def rows(self) -> pd.DataFrame:
        """One row per input row: ``query``, ``context``, ``label`` (if given), ``verdict`` (the headline),
        ``title`` and ``reason`` (the headline in words), ``repcs_verdict``, ``repcs_score``, both answers and one
        column per detector's raw score (fitted detectors: out of fold)."""
        out = []
        for record in self.report["rows"]:
            axes = record.get("axes") or {}
            row = {k: v for k, v in record.items() if k not in ("axes", "scores", "features", "errors", "noisy_z")}
            row["title"], row["reason"] = axes.get("title"), axes.get("reason")
            row.update({f"score.{k}": v for k, v in (record.get("scores") or {}).items()})
            out.append(row)
        return _frame(out)

    @property
    def metrics(self) -> pd.DataFrame:
        """Each detector's AUC [95 % CI], FPR at 95 % TPR, Precision@10 and rows (labeled data; empty otherwise)."""
        from figures.evaluate import metrics_table

        detectors = self.report.get("detectors") or {}
        return metrics_table(detectors) if detectors else _frame([])

    def to_dict(self) -> dict[str, Any]:
        return self.report

    def to_frame(self) -> pd.DataFrame:
        """:attr:`rows`."""
        return self.rows

    def __repr__(self) -> str:
        return f"<Evaluation of {self.report.get('n', len(self.report['rows']))} rows on {self.model}>"


@dataclass(frozen=True, eq=False)
class Calibration(Result):
    """What a model is calibrated with (:meth:`Lab.calibration`; :meth:`Lab.calibrate` returns it too, with the
    engine's report of the calibration it made).

    Attributes:
        status: ``{"model", "axes": {"calibrated", "source", "how"}, "tau": {"source", "in_force"}, …}``.
        report: what ``calibrate-model`` reported (:meth:`Lab.calibrate`), else ``None``.
    """

    status: dict[str, Any]
    report: dict[str, Any] | None = field(default=None)

    @property
    def calibrated(self) -> bool:
        """Whether the headline's axes are calibrated for this model (else its verdict is ``"uncalibrated"``)."""
        return bool(self.status["axes"]["calibrated"])

    @property
    def how(self) -> str:
        """The command that calibrates this model."""
        return str(self.status["axes"]["how"])

    def to_dict(self) -> dict[str, Any]:
        return {**self.status, **({"report": self.report} if self.report is not None else {})}

    def __repr__(self) -> str:
        state = "calibrated" if self.calibrated else f"not calibrated ({self.how})"
        return f"<Calibration of {self.status['model']}: {state}; τ {self.status['tau']['in_force']}>"
