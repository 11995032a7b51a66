"""Noise sweeps: the dose–response over ε for one block of layers, and the single-layer sweep at one ε.

* :func:`dose_response` — Z and log p(first clean answer token) against ε for one block of layers, several
  seeds per ε (CRM Table 5 varies ε ∈ {0.1, 0.5} per block; here ε is a grid).
* :func:`layer_sweep` — every single decoder layer at one ε: ΔZ per layer (CRM appendix J, Table 16 probes
  single layers).

Each cell is one scoring run (:func:`core.methods.ablation.scoring.score_run`) inside its own
:func:`~core.methods.ablation.interventions.noise_injection`, which holds the model only for that run, so a
long sweep never blocks other sessions for more than one run.

What these experiments can and cannot show (CRM §4.4): a change in Z under noise shows the perturbed layers
carry information the context-vs-no-context contrast depends on *for this prompt*; no change does not show
they carry none (residual connections let later layers recover — and why single layers can look immune
while the block is not).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from core.engine import DualPathSettings, PreparedPrompts, prepare_prompts
from core.methods.ablation.interventions import intervention_parts, noise_injection
from core.methods.ablation.layers import format_layers, parse_layers
from core.methods.ablation.scoring import SWEEP_MAX_NEW_TOKENS, ScoredRun, score_run, sweep_settings
from core.methods.ablation.specs import NoiseSpec
from core.model.handle import ModelHandle
from core.model.progress import Progress

DEFAULT_EPS_GRID = (0.0, 0.1, 0.25, 0.5, 1.0)
DEFAULT_SEEDS = (0, 1, 2)
MAX_RUNS = 2000
"""Refuse sweeps with more scoring runs than this (a typo guard)."""


@dataclass
class NoiseGrid:
    """Scoring runs under noise over a grid of conditions × seeds, with the clean reference.

    ``kind`` is ``"dose_response"`` (conditions = ε values, one block of ``layers``) or ``"layer_sweep"``
    (conditions = single layers, one ε). Arrays have shape ``(n_conditions, n_seeds)``.

    Attributes:
        z: Z of each run (nats, T = ``settings["score_window"]``).
        first_token_logprob: log P_retrieval(clean first answer token), nats.
        first_token_logprob_para: log P_parametric(clean first answer token), nats.
        answer_changed: whether the retrieval answer differs from the clean one.
        n_tokens: the retrieval answer's length (Z sums KL over it: a perturbed answer that no longer stops
            early sums more tokens, which raises Z by itself).
        answers: the retrieval answer text of each run.
        clean_*: the same quantities without any intervention.
    """

    kind: str
    layers: list[int]
    eps: list[float]
    seeds: list[int]
    conditions: list[float] | list[int]
    z: np.ndarray
    first_token_logprob: np.ndarray
    first_token_logprob_para: np.ndarray
    answer_changed: np.ndarray
    n_tokens: np.ndarray
    answers: list[list[str]]
    clean_z: float
    clean_first_token_logprob: float
    clean_first_token_logprob_para: float
    clean_answer: str
    clean_first_token: str
    clean_n_tokens: int
    settings: dict[str, Any]
    model: str
    query: str
    context: str
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def z_mean(self) -> np.ndarray:
        return self.z.mean(axis=1)

    @property
    def z_std(self) -> np.ndarray:
        """Sample standard deviation over seeds (0 with one seed)."""
        return _std(self.z, axis=1)

    @property
    def delta_z(self) -> np.ndarray:
        """ΔZ = Z(perturbed) − Z(clean), shape ``(n_conditions, n_seeds)``."""
        return self.z - self.clean_z

    @property
    def logprob_mean(self) -> np.ndarray:
        return self.first_token_logprob.mean(axis=1)

    @property
    def logprob_std(self) -> np.ndarray:
        return _std(self.first_token_logprob, axis=1)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (arrays as nested lists; means and standard deviations included)."""
        return {
            "kind": self.kind,
            "model": self.model,
            "query": self.query,
            "context": self.context,
            "layers": list(self.layers),
            "layers_spec": format_layers(self.layers),
            "eps": list(self.eps),
            "seeds": list(self.seeds),
            "conditions": list(self.conditions),
            "settings": dict(self.settings),
            "clean": {
                "z": self.clean_z,
                "answer": self.clean_answer,
                "n_tokens": self.clean_n_tokens,
                "first_token": self.clean_first_token,
                "first_token_logprob": self.clean_first_token_logprob,
                "first_token_logprob_para": self.clean_first_token_logprob_para,
            },
            "z": self.z.tolist(),
            "z_mean": self.z_mean.tolist(),
            "z_std": self.z_std.tolist(),
            "delta_z_mean": self.delta_z.mean(axis=1).tolist(),
            "first_token_logprob": self.first_token_logprob.tolist(),
            "first_token_logprob_mean": self.logprob_mean.tolist(),
            "first_token_logprob_std": self.logprob_std.tolist(),
            "first_token_logprob_para": self.first_token_logprob_para.tolist(),
            "answer_changed": self.answer_changed.tolist(),
            "n_tokens": self.n_tokens.tolist(),
            "answers": self.answers,
            "timings": dict(self.timings),
        }

    def rows(self) -> list[dict[str, Any]]:
        """One flat record per run (for CSV export)."""
        out = []
        for i, cond in enumerate(self.conditions):
            for j, seed in enumerate(self.seeds):
                layers = [int(cond)] if self.kind == "layer_sweep" else self.layers
                out.append(
                    {
                        "layers": format_layers(layers),
                        "eps": float(cond) if self.kind == "dose_response" else self.eps[0],
                        "seed": seed,
                        "z": float(self.z[i, j]),
                        "delta_z": float(self.z[i, j] - self.clean_z),
                        "first_token_logprob": float(self.first_token_logprob[i, j]),
                        "first_token_logprob_para": float(self.first_token_logprob_para[i, j]),
                        "answer_changed": bool(self.answer_changed[i, j]),
                        "n_tokens": int(self.n_tokens[i, j]),
                        "answer": self.answers[i][j],
                        "clean_z": self.clean_z,
                    }
                )
        return out


def dose_response(
    handle: ModelHandle,
    query: str,
    context: str,
    settings: DualPathSettings,
    layers: str | Sequence[int],
    eps_grid: Sequence[float] = DEFAULT_EPS_GRID,
    seeds: Sequence[int] = DEFAULT_SEEDS,
    *,
    max_new_tokens: int = SWEEP_MAX_NEW_TOKENS,
    progress: Progress | None = None,
    runner: SweepRunner | None = None,
) -> NoiseGrid:
    """Z and log P(first clean answer token) against ε for noise on one block of layers.

    For each ε in the grid and each seed: h′ = h + ε·σ(h)·N(0, 1) at the output of every layer of the block
    (CRM §4.4), retrieval answer re-generated, Z scored. ε = 0 is the clean run itself (no noise is
    drawn; identical to a hooked run with ε = 0). ``1 + (#ε>0)·#seeds`` scoring runs.

    Raises:
        ValueError: bad layers, ε, seeds or inputs.

    ``runner`` makes the scoring runs (default: here, one after the other; ``core.scale.ray_sweep`` spreads
    them over Ray actors).
    """
    parts = intervention_parts(handle)
    block = parse_layers(layers, parts.n_layers)
    grid = _validate_eps_grid(eps_grid)
    seed_list = validate_seeds(seeds)
    for e in grid:
        NoiseSpec(tuple(block), e, seed_list[0]).validate(parts)
    return _noise_grid(
        handle, query, context, settings, kind="dose_response", runs=[(block, e) for e in grid], conditions=grid,
        layers=block, eps=grid, seeds=seed_list, max_new_tokens=max_new_tokens, progress=progress, runner=runner,
    )  # fmt: skip


def layer_sweep(
    handle: ModelHandle,
    query: str,
    context: str,
    settings: DualPathSettings,
    eps: float,
    seeds: Sequence[int] = (0,),
    *,
    layers: str | Sequence[int] | None = None,
    max_new_tokens: int = SWEEP_MAX_NEW_TOKENS,
    progress: Progress | None = None,
    runner: SweepRunner | None = None,
) -> NoiseGrid:
    """Noise on one decoder layer at a time at a fixed ε: ΔZ per layer (CRM appendix J, Table 16).

    ``1 + #layers·#seeds`` scoring runs (``layers`` default: every decoder layer), made by ``runner`` as in
    :func:`dose_response`. ``handle`` may be weightless when the runner scores elsewhere.

    Raises:
        ValueError: bad layers, ε (including ε = 0: every layer would be the clean run) or seeds.
    """
    chosen, seed_list = plan_layer_sweep(handle, eps, seeds, layers)
    return _noise_grid(
        handle, query, context, settings, kind="layer_sweep", runs=[([layer], float(eps)) for layer in chosen],
        conditions=chosen, layers=chosen, eps=[float(eps)], seeds=seed_list, max_new_tokens=max_new_tokens,
        progress=progress, runner=runner,
    )  # fmt: skip


def plan_layer_sweep(
    handle: ModelHandle, eps: float, seeds: Sequence[int], layers: str | Sequence[int] | None = None
) -> tuple[list[int], list[int]]:
    """The single-layer sweep's checked layers (default: every decoder layer) and distinct seeds.

    Checks only the model's shape, so a weightless handle will do (``core.scale.ray_sweep`` plans there).

    Raises:
        ValueError: bad layers, ε (including ε = 0: every layer would be the clean run) or seeds.
    """
    parts = intervention_parts(handle)
    chosen = list(range(parts.n_layers)) if layers is None else parse_layers(layers, parts.n_layers)
    seed_list = validate_seeds(seeds)
    NoiseSpec(tuple(chosen), float(eps), seed_list[0]).validate(parts)
    if float(eps) == 0:
        raise ValueError("A sweep at ε = 0 is the clean run for every layer; choose ε > 0.")
    return chosen, seed_list


def check_run_budget(n_runs: int) -> None:
    """Refuse a sweep of more than :data:`MAX_RUNS` scoring runs (a typo guard).

    Raises:
        ValueError: ``n_runs > MAX_RUNS``.
    """
    if n_runs > MAX_RUNS:
        raise ValueError(f"{n_runs} scoring runs requested; the limit is {MAX_RUNS}. Use fewer seeds or conditions.")


class RunOutcome(Protocol):
    """What :func:`assemble_grid` reads of a scoring run: a :class:`ScoredRun`, or a record with these fields."""

    z: float
    first_token_logprob: float
    first_token_logprob_para: float
    answer_ids: list[int]
    answer: str


def assemble_grid(
    clean: RunOutcome,
    cells: Sequence[Sequence[RunOutcome]],
    *,
    kind: str,
    clean_first_token: str,
    conditions: list[float] | list[int],
    layers: list[int],
    eps: list[float],
    seeds: list[int],
    settings: DualPathSettings,
    model: str,
    query: str,
    context: str,
    elapsed_s: float,
    n_runs: int,
) -> NoiseGrid:
    """The :class:`NoiseGrid` of the clean run and one run per (condition, seed) (``cells[i][j]``).

    The local sweeps and the Ray sweep (``core.scale.ray_sweep``) build their grids here, so both are the same
    for the same runs.
    """
    shape = (len(cells), len(seeds))
    z = np.zeros(shape)
    lp = np.zeros(shape)
    lp_para = np.zeros(shape)
    changed = np.zeros(shape, dtype=bool)
    lengths = np.zeros(shape, dtype=np.int64)
    for i, row in enumerate(cells):
        for j, rec in enumerate(row):
            z[i, j] = rec.z
            lp[i, j] = rec.first_token_logprob
            lp_para[i, j] = rec.first_token_logprob_para
            changed[i, j] = list(rec.answer_ids) != list(clean.answer_ids)
            lengths[i, j] = len(rec.answer_ids)
    return NoiseGrid(
        kind=kind,
        layers=layers,
        eps=eps,
        seeds=seeds,
        conditions=conditions,
        z=z,
        first_token_logprob=lp,
        first_token_logprob_para=lp_para,
        answer_changed=changed,
        n_tokens=lengths,
        answers=[[rec.answer for rec in row] for row in cells],
        clean_z=clean.z,
        clean_first_token_logprob=clean.first_token_logprob,
        clean_first_token_logprob_para=clean.first_token_logprob_para,
        clean_answer=clean.answer,
        clean_first_token=clean_first_token,
        clean_n_tokens=len(clean.answer_ids),
        settings=settings.to_dict(),
        model=model,
        query=query,
        context=context,
        timings={"total_s": elapsed_s, "runs": float(n_runs), "per_run_s": elapsed_s / n_runs},
    )


SweepRun = tuple[list[int], float, int]
"""One scoring run of a sweep under noise: (decoder layers, ε, seed)."""
SweepRunner = Callable[
    [ModelHandle, PreparedPrompts, DualPathSettings, list[SweepRun], Progress | None],
    tuple[RunOutcome, list[RunOutcome], str],
]
"""How a sweep's scoring runs are made (:func:`run_locally` here; ``core.scale.ray_sweep`` on Ray):
``runner(handle, prepared, settings, runs, progress)`` returns the clean reference run, one run per
``(layers, ε, seed)`` of ``runs`` under that noise (each log p of the clean run's first answer token) in order,
and that token's text."""


def run_locally(
    handle: ModelHandle,
    prepared: PreparedPrompts,
    settings: DualPathSettings,
    runs: list[SweepRun],
    progress: Progress | None,
) -> tuple[ScoredRun, list[ScoredRun], str]:
    """:class:`SweepRunner` through ``handle``: the clean run, then each run in its own
    :func:`~core.methods.ablation.interventions.noise_injection` (the model is held for one run at a time)."""
    n_runs = 1 + len(runs)
    clean = score_run(handle, prepared, settings)
    if progress is not None:
        progress(1, n_runs, "clean reference")
    first = clean.answer_ids[0]
    out: list[ScoredRun] = []
    for done, (run_layers, e, seed) in enumerate(runs, start=2):
        with noise_injection(handle, run_layers, e, seed):
            out.append(score_run(handle, prepared, settings, first))
        if progress is not None:
            progress(done, n_runs, f"layers {format_layers(run_layers)} · ε = {e:g} · seed {seed}")
    return clean, out, handle.decode_tokens([first])[0]


def _noise_grid(
    handle: ModelHandle,
    query: str,
    context: str,
    settings: DualPathSettings,
    *,
    kind: str,
    runs: list[tuple[list[int], float]],
    conditions: list[float] | list[int],
    layers: list[int],
    eps: list[float],
    seeds: list[int],
    max_new_tokens: int,
    progress: Progress | None,
    runner: SweepRunner | None,
) -> NoiseGrid:
    """The clean reference, then one scoring run per (condition, seed) with ε > 0 (ε = 0 reuses the clean run)."""
    s = sweep_settings(settings, max_new_tokens)
    prepared = prepare_prompts(handle, query, context, s)
    noisy = [(run_layers, e, seed) for run_layers, e in runs if e > 0 for seed in seeds]
    n_runs = 1 + len(noisy)
    check_run_budget(n_runs)
    t0 = time.perf_counter()
    clean, outcomes, first_token = (runner or run_locally)(handle, prepared, s, noisy, progress)
    made = iter(outcomes)
    # ε = 0 adds exact zeros: the run is the clean run (tests check this)
    cells = [[clean if e == 0 else next(made) for _ in seeds] for _, e in runs]
    return assemble_grid(
        clean, cells, kind=kind, clean_first_token=first_token, conditions=conditions,
        layers=layers, eps=eps, seeds=seeds, settings=s, model=handle.info.name, query=prepared.query,
        context=prepared.context, elapsed_s=time.perf_counter() - t0, n_runs=n_runs,
    )  # fmt: skip


def _validate_eps_grid(eps_grid: Sequence[float]) -> list[float]:
    grid = sorted({float(e) for e in eps_grid})
    if not grid:
        raise ValueError("The ε grid is empty.")
    if any(not np.isfinite(e) or e < 0 for e in grid):
        raise ValueError(f"ε values must be finite and >= 0, got {list(eps_grid)[:10]}")
    return grid


def validate_seeds(seeds: Sequence[int]) -> list[int]:
    """The distinct seeds in order, each an integer in [0, 2^63).

    Raises:
        ValueError: a seed that is not such an integer, or no seed.
    """
    out: list[int] = []
    for s in seeds:
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or not 0 <= int(s) < 2**63:
            raise ValueError(f"seeds must be integers in [0, 2^63), got {s!r}")
        if int(s) not in out:
            out.append(int(s))
    if not out:
        raise ValueError("Give at least one seed.")
    return out


def _std(x: np.ndarray, axis: int) -> np.ndarray:
    """Sample standard deviation (ddof = 1) along ``axis``; 0 where there is a single value."""
    n = x.shape[axis]
    return x.std(axis=axis, ddof=1) if n > 1 else np.zeros(np.delete(x.shape, axis))
