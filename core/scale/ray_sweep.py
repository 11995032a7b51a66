"""``python -m core ablate --sweep … --ray``: a noise sweep with its scoring runs spread over Ray actors.

:func:`core.methods.ablation.sweep.layer_sweep` makes ``1 + #layers·#seeds`` independent scoring runs: the clean
reference, then one run per (layer, seed) inside :func:`~core.methods.ablation.interventions.noise_injection`.
:class:`RaySweepRunner` is its ``runner`` on Ray: each run is one item of :func:`core.scale.pool.run_items`;
every actor prepares the prompts once and computes the clean run once (its first answer token anchors every
run's log p), then scores its (layers, ε, seed) runs with the same
:func:`~core.methods.ablation.scoring.score_run`. The driver runs ``layer_sweep`` itself on the weightless
:func:`core.scale.spec.planning_handle` (layers, ε, seeds, the token budget checked there) and so assembles the
same :class:`~core.methods.ablation.sweep.NoiseGrid` as the local sweep. The noise of a run depends only on its
layers, ε, seed and token positions, so the grid equals the local one.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from core.engine import DualPathSettings, PreparedPrompts, prepare_prompts
from core.methods.ablation import ScoredRun, noise_injection, score_run
from core.methods.ablation.sweep import SweepRun
from core.model.handle import ModelHandle
from core.model.progress import Progress
from core.scale.pool import RunStats, run_items
from core.scale.spec import ModelSpec

CLEAN = -1
"""The ``layer`` of the clean reference run's item."""


def _record(handle: ModelHandle, run: ScoredRun) -> dict[str, Any]:
    return {
        "z": float(run.z),
        "first_token_logprob": float(run.first_token_logprob),
        "first_token_logprob_para": float(run.first_token_logprob_para),
        "answer_ids": [int(i) for i in run.answer_ids],
        "answer": run.answer,
        "first_token": handle.decode_tokens([run.answer_ids[0]])[0] if run.answer_ids else "",
    }


class SweepHandler:
    """The actors' side: ``{"layers", "eps", "seed"}`` items → scoring runs under that noise (no layer: the clean run).

    Args:
        handle: the actor's model.
        config: ``{"query", "context", "settings" (the sweep's settings)}``.
    """

    def __init__(self, handle: ModelHandle, config: dict[str, Any]) -> None:
        self.handle = handle
        self.settings = DualPathSettings.from_dict(config["settings"])
        self.prepared = prepare_prompts(handle, config["query"], config["context"], self.settings)
        self._clean: ScoredRun | None = None

    @property
    def clean(self) -> ScoredRun:
        """The clean run (computed once per actor: every run's log p is of its first token)."""
        if self._clean is None:
            self._clean = score_run(self.handle, self.prepared, self.settings)
        return self._clean

    def __call__(self, payloads: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for p in payloads:
            if not p["layers"]:
                out.append(_record(self.handle, self.clean))
                continue
            first = self.clean.answer_ids[0]
            with noise_injection(self.handle, [int(x) for x in p["layers"]], float(p["eps"]), int(p["seed"])):
                run = score_run(self.handle, self.prepared, self.settings, first)
            out.append(_record(self.handle, run))
        return out


class RaySweepRunner:
    """A sweep's ``runner`` (:data:`core.methods.ablation.sweep.SweepRunner`) that makes every scoring run on
    the connected Ray cluster, one item each (call :func:`core.scale.cluster.connect` first).

    Attributes:
        stats: the last run's :class:`RunStats` (``None`` before the first).
    """

    def __init__(self, spec: ModelSpec, *, workers: int | None = None, progress: Progress | None = None) -> None:
        self.spec = spec
        self.workers = workers
        self.progress = progress
        self.stats: RunStats | None = None

    def __call__(
        self,
        handle: ModelHandle,
        prepared: PreparedPrompts,
        settings: DualPathSettings,
        runs: list[SweepRun],
        progress: Progress | None,
    ) -> tuple[Any, list[Any], str]:
        """As :func:`core.methods.ablation.sweep.run_locally`; ``progress`` is called as items come back (this
        runner's own ``progress``, if it has one, takes precedence)."""
        items = [{"layers": [], "eps": 0.0, "seed": 0}]
        items += [{"layers": list(layers), "eps": float(e), "seed": int(seed)} for layers, e, seed in runs]
        config = {"query": prepared.query, "context": prepared.context, "settings": settings.to_dict()}
        results, self.stats = run_items(
            "sweep", self.spec, config, [[it] for it in items], workers=self.workers, progress=self.progress or progress
        )
        clean, *outcomes = [SimpleNamespace(**rec) for rec in results]
        return clean, outcomes, clean.first_token
