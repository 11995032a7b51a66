"""A model to study, in a notebook: :class:`Lab` runs, ablates and evaluates, through the engine's one door.

Everything here calls :mod:`core` (the engine, the methods, the evaluation) exactly as the pages and ``python -m
core`` do; no number is computed a second way. ``Lab()`` is the embedded model (offline, from its PyPI package);
``Lab("path/or/id")`` any model the app loads (a folder, a GGUF file, a packaged model's shortcut, a hub id).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from read_or_recall.run import Run

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go

    from core.engine.settings import DualPathSettings
    from core.engine.threshold import Threshold
    from core.model.handle import ModelHandle


class Lab:
    """One loaded model and the run settings used by default.

    Args:
        model: ``None`` (the embedded SmolLM2-135M-Instruct), a local folder, a GGUF file, a packaged model's
            shortcut (``"gemma3-270m"``) or a Hugging Face id (fetched only if the hub is reachable and
            ``HF_HUB_OFFLINE`` is not set).
        device, revision: as ``--device`` / ``--revision`` of the command line (default: CUDA when available).
        settings: the default :class:`~core.engine.settings.DualPathSettings` of :meth:`run` (default: the app's).
        handle: an already-loaded :class:`~core.model.handle.ModelHandle` instead of ``model`` (e.g. a tiny model
            in a test).

    Raises:
        core.model.handle.ModelLoadError: the model cannot be loaded (the message says why).
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        device: str | None = None,
        revision: str | None = None,
        settings: DualPathSettings | None = None,
        handle: ModelHandle | None = None,
    ) -> None:
        from core.engine.settings import DualPathSettings

        if handle is None:
            from core.model.loading import load_model

            handle = load_model(model, revision=revision, device=device)
        self.handle = handle
        self.settings = settings or DualPathSettings()
        self.settings.validate()

    @property
    def model(self) -> str:
        """The model's name, as every result and calibration file names it."""
        return self.handle.info.name

    @property
    def info(self) -> dict[str, Any]:
        """The model's facts: name, layers, heads, vocabulary, device, dtype, token budget."""
        return self.handle.info.to_dict()

    def __repr__(self) -> str:
        return f"<Lab {self.model}>"

    def _settings(self, settings: DualPathSettings | None, overrides: Mapping[str, Any]) -> DualPathSettings:
        chosen = dataclasses.replace(settings or self.settings, **overrides)
        chosen.validate()
        return chosen

    def run(
        self,
        query: str,
        context: str,
        *,
        settings: DualPathSettings | None = None,
        threshold: Threshold | None = None,
        **overrides: Any,
    ) -> Run:
        """Both paths on one query and context: the run of the Dual Path page and of ``python -m core run``.

        Args:
            query, context: the user's text.
            settings: run settings (default: the lab's); ``overrides`` replace single fields
                (``max_new_tokens=32``, ``template="A"``, …).
            threshold: RePCS' τ to apply (default: the τ in force for the model).

        Returns:
            A :class:`~read_or_recall.run.Run`: ``.verdict`` (the headline), ``.axes``, ``.span``,
            ``.detectors()``, ``.figure(name)``, ``.swap_test()``.

        Raises:
            ValueError: empty or too long inputs, or a setting out of range (nothing has run then).
        """
        from core.engine import run_dual_path

        chosen = self._settings(settings, overrides)
        result = run_dual_path(self.handle, query, context, chosen, threshold=threshold, record=True)
        return Run(self, result)

    def run_many(
        self, pairs: Iterable[tuple[str, str]], *, settings: DualPathSettings | None = None, **overrides: Any
    ) -> list[Run]:
        """Many ``(query, context)`` pairs in padded batches (:func:`core.engine.score_rows`: one generate and one
        forward per batch), each with its headline. The parametric answers are generated too, as in :meth:`run`."""
        from core.engine import score_rows

        chosen = self._settings(settings, overrides)
        results = score_rows(self.handle, list(pairs), chosen, free_parametric=True)
        return [Run(self, r) for r in results if r is not None]

    # ---------------------------------------------------------------------------------------------------------
    # Ablations

    def ablate(
        self,
        run: Run,
        layers: str | Sequence[int],
        *,
        eps: float = 1.0,
        seed: int = 0,
        patch: bool = False,
    ) -> Ablation:
        """Noise injection (h′ = h + ε·σ(h)·N(0, 1), CRM §4.4) or activation patching on decoder ``layers`` of
        ``run``'s inputs: both paths re-generated under the intervention, as on the Ablations page.

        Args:
            run: the clean run.
            layers: decoder layers, as the page writes them (``"10-15"``, ``"1,3,5-7"``, a preset name) or a list.
            eps, seed: the noise scale and its seed (noise); ignored with ``patch``.
            patch: activation patching of ``layers`` at the last prompt token (the no-context prompt's states into
                the retrieval prompt) instead of noise.

        Raises:
            ValueError: bad layers, ε or seed (nothing has run then).
        """
        from core.methods import ablation

        n_layers = self.handle.info.n_layers
        chosen = ablation.parse_layers(layers, n_layers)
        clean = run.result
        first = clean.answer_token_ids[0] if clean.n_tokens else None
        settings = clean.run_settings
        if patch:
            perturbed = ablation.perturbed_run(
                self.handle, clean.query, clean.context, settings, patch_layers=chosen, clean_first_token=first
            )
        else:
            noise = ablation.NoiseSpec(tuple(chosen), float(eps), int(seed))
            perturbed = ablation.perturbed_run(
                self.handle, clean.query, clean.context, settings, noise=noise, clean_first_token=first
            )
        if "clean_trajectory" not in run._cache:
            run._cache["clean_trajectory"] = ablation.layer_trajectory(self.handle, clean)
        return Ablation(run, Run(self, perturbed), chosen, run._cache["clean_trajectory"])

    def dose_response(
        self,
        run: Run,
        layers: str | Sequence[int],
        eps_grid: Sequence[float] | None = None,
        seeds: Sequence[int] | None = None,
    ) -> Any:
        """Z and log P(first clean token) against ε for noise on one block of layers (the Ablations page's
        dose–response; ``1 + #ε·#seeds`` scoring runs). Its figure: :func:`noise_grid_figure`."""
        from core.methods import ablation
        from core.methods.ablation.sweep import DEFAULT_EPS_GRID, DEFAULT_SEEDS

        clean = run.result
        return ablation.dose_response(
            self.handle,
            clean.query,
            clean.context,
            clean.run_settings,
            layers,
            DEFAULT_EPS_GRID if eps_grid is None else eps_grid,
            DEFAULT_SEEDS if seeds is None else seeds,
        )

    def layer_sweep(self, run: Run, eps: float = 1.0, seeds: Sequence[int] = (0,), layers: Any = None) -> Any:
        """Noise on one decoder layer at a time at a fixed ε: ΔZ per layer (CRM appendix J; ``1 + #layers·#seeds``
        scoring runs). Its figure: :func:`noise_grid_figure`."""
        from core.methods import ablation

        clean = run.result
        return ablation.layer_sweep(
            self.handle, clean.query, clean.context, clean.run_settings, eps, seeds, layers=layers
        )

    # ---------------------------------------------------------------------------------------------------------
    # Evaluation

    def evaluate(
        self,
        data: pd.DataFrame | Sequence[Mapping[str, Any]],
        *,
        detectors: Sequence[str] | None = None,
        settings: DualPathSettings | None = None,
        progress: Callable[[int, int], None] | None = None,
        **options: Any,
    ) -> Evaluation:
        """Every row of ``data`` through the engine and the chosen detectors, as ``python -m core evaluate`` and the
        Evaluate page do; each row also gets its headline (``verdict``, ``axes``) and RePCS' verdict.

        Args:
            data: a DataFrame (or records) with ``query`` and ``context`` columns and, for the detection metrics,
                ``label`` (``memorized`` / ``grounded``); other columns ride along (``extra.<name>`` in the rows).
            detectors: registered names (default ``["repcs"]``; yours too, :func:`read_or_recall.register_detector`).
            progress: ``progress(done, total)`` as rows finish.
            options: :class:`core.evaluation.evaluate.EvaluateOptions` fields (``n_boot``, ``batch_size``,
                ``noise_sigmas``, ``swap_test``, …; labeled data only).

        Returns:
            An :class:`Evaluation`: ``.rows`` (a DataFrame, one row per input row), ``.metrics`` (per detector;
            labeled data), ``.figure(name)``.

        Raises:
            ValueError: a missing column, an empty or too long text, an unknown detector, a bad label
                (:class:`core.evaluation.DataError` names the row and column).
        """
        import pandas as pd

        frame = data if isinstance(data, pd.DataFrame) else pd.DataFrame(list(data))
        missing = [c for c in ("query", "context") if c not in frame.columns]
        if missing:
            raise ValueError(f"evaluate needs the columns query and context; missing: {', '.join(missing)}")
        chosen = self._settings(settings, {})
        names = list(detectors or ["repcs"])
        if "label" in frame.columns:
            from core.evaluation import evaluate_rows, parse_labeled_bytes

            rows = parse_labeled_bytes(frame.to_csv(index=False).encode("utf-8"))
            report = evaluate_rows(self.handle, rows, chosen, detectors=names, progress=progress, **options)
            return Evaluation(self, report)
        if options:
            raise ValueError(f"{sorted(options)}: these options need a label column (detection metrics).")
        return Evaluation(self, self._score_unlabeled(frame, chosen, names, progress))

    def _score_unlabeled(
        self,
        frame: pd.DataFrame,
        settings: DualPathSettings,
        names: list[str],
        progress: Callable[[int, int], None] | None,
    ) -> dict[str, Any]:
        from core.engine import ScoreRequest, plan_batches, prepare_prompts
        from core.engine.batch import DEFAULT_BATCH_SIZE
        from core.evaluation.data import LabeledRow
        from core.evaluation.scoring import resolve_detectors, score_records

        rows = [
            LabeledRow(i + 1, str(q), str(c), "", {k: str(v) for k, v in extra.items()})
            for i, (q, c, extra) in enumerate(
                zip(frame["query"], frame["context"], frame.drop(columns=["query", "context"]).to_dict("records"))
            )
        ]
        chosen = resolve_detectors(names)
        request = ScoreRequest.of(settings).resolved(self.handle)
        lengths = [len(prepare_prompts(self.handle, r.query, r.context, settings).retrieval.ids) for r in rows]
        records: list[dict[str, Any] | None] = [None] * len(rows)
        done = 0
        for batch in plan_batches(lengths, DEFAULT_BATCH_SIZE, settings.max_new_tokens):
            for i, record in zip(batch, score_records(self.handle, [rows[i] for i in batch], request, chosen)):
                record.pop("label", None)
                records[i] = record
            done += len(batch)
            if progress is not None:
                progress(done, len(rows))
        return {"n": len(rows), "model": self.model, "settings": settings.to_dict(), "detectors": {}, "rows": records}

    # ---------------------------------------------------------------------------------------------------------
    # Calibration

    def calibration(self) -> dict[str, Any]:
        """What this model is calibrated with: the headline's axes calibration and RePCS' τ
        (:func:`read_or_recall.calibration.status`). A model without its own axes calibration gets the verdict
        ``"uncalibrated"`` and the command that makes one."""
        from read_or_recall.calibration import status

        return status(self.model)

    def calibrate(self, **options: Any) -> Any:
        """Calibrate this model with the engine's ``calibrate-model`` (:func:`read_or_recall.calibration.calibrate`:
        ``budget=``, ``progress=``, … as the engine takes them); later runs get a calibrated headline.

        Raises:
            NotImplementedError: this engine has no ``calibrate-model``.
        """
        from read_or_recall.calibration import calibrate

        return calibrate(self, **options)


class Ablation:
    """A clean run and the same inputs re-generated under noise or patching (:meth:`Lab.ablate`).

    Attributes:
        clean, perturbed: the two :class:`~read_or_recall.run.Run`.
        layers: the decoder layers intervened on.
        comparison: what changed (:func:`core.methods.ablation.compare`: Z clean/perturbed, ΔZ, both verdicts
            — the headline's —, which tokens changed).
    """

    def __init__(self, clean: Run, perturbed: Run, layers: list[int], clean_trajectory: Any) -> None:
        from core.methods.ablation import compare

        self.clean, self.perturbed, self.layers = clean, perturbed, layers
        self.clean_trajectory = clean_trajectory
        self.comparison = compare(clean.result, perturbed.result)

    @property
    def delta_z(self) -> float:
        """Z(perturbed) − Z(clean), nats."""
        return float(self.comparison["delta_z"])

    FIGURES = ("kl_compare", "token_diff", "trajectory")
    """The Ablations page's charts of one comparison."""

    def figure(self, name: str = "kl_compare", *, path: str = "retrieval") -> go.Figure:
        """``"kl_compare"`` (KL per answer token, clean vs perturbed), ``"token_diff"`` (the perturbed answer of
        ``path`` with its changed tokens marked) or ``"trajectory"`` (the per-layer trajectory at the last prompt
        token, clean vs perturbed) — the Ablations page's figures, from the same functions.

        Raises:
            ValueError: an unknown name or path.
        """
        from core.methods import ablation
        from figures import ablation as figs

        clean, new = self.clean.result, self.perturbed.result
        if name == "kl_compare":
            return figs.kl_compare_figure(
                clean.answer_tokens, clean.token_kl, new.answer_tokens, new.token_kl, clean.score_window
            )
        if name == "token_diff":
            if path not in ("retrieval", "parametric"):
                raise ValueError(f"path must be 'retrieval' or 'parametric', got {path!r}")
            changed = self.comparison["rag_changed" if path == "retrieval" else "parametric_changed"]
            return figs.token_diff_figure(new.path(path).tokens, changed, clean.path(path).tokens)
        if name == "trajectory":
            traj = new.extras.get("trajectory")
            if traj is None:
                raise ValueError("The perturbed run has no trajectory.")
            pert, base = ablation.Trajectory.from_dict(traj), self.clean_trajectory
            return figs.trajectory_figure(
                base.values, pert.values, kind=base.kind, intervened=self.layers, flagged=base.flagged
            )
        raise ValueError(f"Unknown ablation figure {name!r}; choose one of {', '.join(self.FIGURES)}.")

    def __repr__(self) -> str:
        return (
            f"<Ablation layers {self.layers}: Z {self.comparison['z_clean']:.3f} → "
            f"{self.comparison['z_perturbed']:.3f} nats, verdict {self.clean.verdict} → {self.perturbed.verdict}>"
        )


def noise_grid_figure(grid: Any) -> go.Figure:
    """The Ablations page's dose–response or single-layer sweep figure of a :meth:`Lab.dose_response` /
    :meth:`Lab.layer_sweep` grid."""
    from figures import ablation as figs

    if grid.kind == "layer_sweep":
        return figs.layer_sweep_figure(grid)
    return figs.dose_response_figure(grid)


class Evaluation:
    """The rows of :meth:`Lab.evaluate` and, on labeled data, each detector's metrics.

    Attributes:
        report: the whole report, as ``python -m core evaluate`` writes it (``rows``, ``detectors``, ``robustness``).
    """

    FIGURES = ("roc", "robustness")
    """The Evaluate page's figures of a labeled evaluation."""

    def __init__(self, lab: Lab, report: dict[str, Any]) -> None:
        self.lab, self.report = lab, report

    @property
    def rows(self) -> pd.DataFrame:
        """One row per input row: ``query``, ``context``, ``label`` (if given), ``verdict`` (the headline),
        ``title`` and ``reason`` (the headline in words), ``repcs_verdict``, ``repcs_score``, both answers and one
        column per detector's raw score (fitted detectors: out of fold)."""
        import pandas as pd

        out = []
        for record in self.report["rows"]:
            axes = record.get("axes") or {}
            row = {k: v for k, v in record.items() if k not in ("axes", "scores", "features", "errors", "noisy_z")}
            row["title"], row["reason"] = axes.get("title"), axes.get("reason")
            row.update({f"score.{k}": v for k, v in (record.get("scores") or {}).items()})
            out.append(row)
        return pd.DataFrame(out)

    @property
    def metrics(self) -> pd.DataFrame:
        """Each detector's AUC [95 % CI], FPR at 95 % TPR, Precision@10 and rows (labeled data; empty otherwise)."""
        import pandas as pd

        from figures.evaluate import metrics_table

        detectors = self.report.get("detectors") or {}
        return metrics_table(detectors) if detectors else pd.DataFrame()

    def figure(self, name: str = "roc") -> go.Figure:
        """``"roc"`` (every detector's ROC curve) or ``"robustness"`` (AUC per logit-noise σ) — the Evaluate page's
        figures, from the same functions.

        Raises:
            ValueError: an unknown name, or a figure the report has no data for (unlabeled rows).
        """
        from figures import evaluate as ef

        if name == "roc":
            if not self.report.get("detectors"):
                raise ValueError("No ROC without labels: evaluate a DataFrame with a label column.")
            return ef.roc_figure(self.report["detectors"])
        if name == "robustness":
            table = self.report.get("robustness")
            if not table:
                raise ValueError("No robustness table: it needs labeled rows and noise σ values.")
            return ef.robustness_figure(table)
        raise ValueError(f"Unknown evaluation figure {name!r}; choose one of {', '.join(self.FIGURES)}.")

    def __repr__(self) -> str:
        return f"<Evaluation of {self.report.get('n', len(self.report['rows']))} rows on {self.lab.model}>"
