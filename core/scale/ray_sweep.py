"""``python -m core ablate --sweep … --ray``: the single-layer noise sweep with its runs spread over Ray actors.

:func:`core.methods.ablation.sweep.layer_sweep` makes ``1 + #layers·#seeds`` independent scoring runs: the clean
reference, then one run per (layer, seed) inside :func:`~core.methods.ablation.interventions.noise_injection`.
Here each run is one item of :func:`core.scale.pool.run_items`; every actor prepares the prompts once and
computes the clean run once (its first answer token anchors every run's log p), then scores its (layer, seed)
runs with the same :func:`~core.methods.ablation.scoring.score_run`. The driver validates the request on the
weightless :func:`core.scale.spec.planning_handle` (layers, ε, seeds, the token budget) and assembles the same
:class:`~core.methods.ablation.sweep.NoiseGrid` as the local sweep. The noise of a run depends only on its
layer, ε, seed and token positions, so the grid equals the local one.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from core.engine import DualPathSettings, prepare_prompts
from core.methods.ablation import (
    SWEEP_MAX_NEW_TOKENS,
    NoiseGrid,
    ScoredRun,
    assemble_grid,
    check_run_budget,
    noise_injection,
    plan_layer_sweep,
    score_run,
    sweep_settings,
)
from core.model.handle import ModelHandle
from core.model.progress import Progress
from core.scale.pool import RunStats, run_items
from core.scale.spec import ModelSpec, planning_handle

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
    """The actors' side: ``{"layer", "seed"}`` items → scoring runs under noise at the sweep's ε.

    Args:
        handle: the actor's model.
        config: ``{"query", "context", "settings" (the sweep's settings), "eps"}``.
    """

    def __init__(self, handle: ModelHandle, config: dict[str, Any]) -> None:
        self.handle = handle
        self.settings = DualPathSettings.from_dict(config["settings"])
        self.eps = float(config["eps"])
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
            if int(p["layer"]) == CLEAN:
                out.append(_record(self.handle, self.clean))
                continue
            first = self.clean.answer_ids[0]
            with noise_injection(self.handle, [int(p["layer"])], self.eps, int(p["seed"])):
                run = score_run(self.handle, self.prepared, self.settings, first)
            out.append(_record(self.handle, run))
        return out


def layer_sweep_on_ray(
    spec: ModelSpec,
    query: str,
    context: str,
    settings: DualPathSettings,
    eps: float,
    seeds: Sequence[int] = (0,),
    *,
    layers: str | Sequence[int] | None = None,
    max_new_tokens: int = SWEEP_MAX_NEW_TOKENS,
    workers: int | None = None,
    progress: Progress | None = None,
    planner: ModelHandle | None = None,
) -> tuple[NoiseGrid, RunStats]:
    """:func:`core.methods.ablation.layer_sweep` with one Ray item per scoring run (call
    :func:`core.scale.cluster.connect` first).

    Returns:
        The :class:`NoiseGrid` (as the local sweep's) and the run's :class:`RunStats`.

    Raises:
        ValueError: bad layers, ε (including ε = 0), seeds, or inputs over the token budget.
    """
    planner = planner or planning_handle(spec)
    chosen, seed_list = plan_layer_sweep(planner, eps, seeds, layers)
    s = sweep_settings(settings, max_new_tokens)
    prepared = prepare_prompts(planner, query, context, s)
    n_runs = 1 + len(chosen) * len(seed_list)
    check_run_budget(n_runs)
    items = [{"layer": CLEAN, "seed": 0}] + [{"layer": la, "seed": sd} for la in chosen for sd in seed_list]
    config = {"query": query, "context": context, "settings": s.to_dict(), "eps": float(eps)}
    t0 = time.perf_counter()
    results, stats = run_items("sweep", spec, config, [[it] for it in items], workers=workers, progress=progress)
    clean, *cells = [SimpleNamespace(**rec) for rec in results]
    n = len(seed_list)
    grid = assemble_grid(
        clean, [cells[i * n : (i + 1) * n] for i in range(len(chosen))], kind="layer_sweep",
        clean_first_token=clean.first_token, conditions=chosen, layers=chosen, eps=[float(eps)], seeds=seed_list,
        settings=s, model=planner.info.name, query=prepared.query, context=prepared.context,
        elapsed_s=time.perf_counter() - t0, n_runs=n_runs,
    )  # fmt: skip
    return grid, stats
