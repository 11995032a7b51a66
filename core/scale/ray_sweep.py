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
from typing import Any

import numpy as np

from core.engine import DualPathSettings, prepare_prompts
from core.methods.ablation import (
    MAX_RUNS,
    SWEEP_MAX_NEW_TOKENS,
    NoiseGrid,
    NoiseSpec,
    ScoredRun,
    intervention_parts,
    noise_injection,
    parse_layers,
    score_run,
    sweep_settings,
)
from core.model.handle import ModelHandle
from core.scale.pool import Progress, RunStats, run_items
from core.scale.spec import ModelSpec, planning_handle

CLEAN = -1
"""The ``layer`` of the clean reference run's item."""


def _seeds(seeds: Sequence[int]) -> list[int]:
    """The distinct seeds in order, checked as the local sweep checks them."""
    out: list[int] = []
    for s in seeds:
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or not 0 <= int(s) < 2**63:
            raise ValueError(f"seeds must be integers in [0, 2^63), got {s!r}")
        if int(s) not in out:
            out.append(int(s))
    if not out:
        raise ValueError("Give at least one seed.")
    return out


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
    parts = intervention_parts(planner)
    chosen = list(range(parts.n_layers)) if layers is None else parse_layers(layers, parts.n_layers)
    seed_list = _seeds(seeds)
    NoiseSpec(tuple(chosen), float(eps), seed_list[0]).validate(parts)
    if float(eps) == 0:
        raise ValueError("A sweep at ε = 0 is the clean run for every layer; choose ε > 0.")
    s = sweep_settings(settings, max_new_tokens)
    prepared = prepare_prompts(planner, query, context, s)
    n_runs = 1 + len(chosen) * len(seed_list)
    if n_runs > MAX_RUNS:
        raise ValueError(f"{n_runs} scoring runs requested; the limit is {MAX_RUNS}. Use fewer seeds or conditions.")
    items = [{"layer": CLEAN, "seed": 0}] + [{"layer": la, "seed": sd} for la in chosen for sd in seed_list]
    config = {"query": query, "context": context, "settings": s.to_dict(), "eps": float(eps)}
    t0 = time.perf_counter()
    results, stats = run_items("sweep", spec, config, [[it] for it in items], workers=workers, progress=progress)
    clean, cells = results[0], results[1:]
    shape = (len(chosen), len(seed_list))
    z = np.zeros(shape)
    lp = np.zeros(shape)
    lp_para = np.zeros(shape)
    changed = np.zeros(shape, dtype=bool)
    lengths = np.zeros(shape, dtype=np.int64)
    answers: list[list[str]] = []
    for i in range(len(chosen)):
        row: list[str] = []
        for j in range(len(seed_list)):
            rec = cells[i * len(seed_list) + j]
            z[i, j] = rec["z"]
            lp[i, j] = rec["first_token_logprob"]
            lp_para[i, j] = rec["first_token_logprob_para"]
            changed[i, j] = rec["answer_ids"] != clean["answer_ids"]
            lengths[i, j] = len(rec["answer_ids"])
            row.append(rec["answer"])
        answers.append(row)
    elapsed = time.perf_counter() - t0
    grid = NoiseGrid(
        kind="layer_sweep",
        layers=chosen,
        eps=[float(eps)],
        seeds=seed_list,
        conditions=chosen,
        z=z,
        first_token_logprob=lp,
        first_token_logprob_para=lp_para,
        answer_changed=changed,
        n_tokens=lengths,
        answers=answers,
        clean_z=clean["z"],
        clean_first_token_logprob=clean["first_token_logprob"],
        clean_first_token_logprob_para=clean["first_token_logprob_para"],
        clean_answer=clean["answer"],
        clean_first_token=clean["first_token"],
        clean_n_tokens=len(clean["answer_ids"]),
        settings=s.to_dict(),
        model=planner.info.name,
        query=prepared.query,
        context=prepared.context,
        timings={"total_s": elapsed, "runs": float(n_runs), "per_run_s": elapsed / n_runs},
    )
    return grid, stats
