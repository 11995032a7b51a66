"""Ablation experiments on the dual path: perturbed runs, dose–response, single-layer sweeps, patching.

Built on the interventions of :mod:`core.interventions` (CRM §4.4 and appendix J):

* :func:`perturbed_run` — the full dual-path analysis (both answers re-generated, KL per token, Z, the
  per-layer trajectory) under noise and/or activation patching, for display next to the clean run.
* :func:`dose_response` — Z and log p(first clean answer token) against ε for one block of layers, several
  seeds per ε (CRM Table 5 varies ε ∈ {0.1, 0.5} per block; here ε is a grid).
* :func:`layer_sweep` — every single decoder layer at one ε: ΔZ per layer (CRM appendix J, Table 16 probes
  single layers).
* :func:`patching_scores` — Z with h_ℓ(context) at the last prompt token replaced by h_ℓ(no context).

Sweeps use a lean scoring run (one greedy generation of the retrieval answer with its logits + one
teacher-forced parametric pass, exactly the maths of :func:`core.engine.run_dual_path` with
``free_parametric=False``) and short answers (:data:`SWEEP_MAX_NEW_TOKENS`, T = the same), so Z values
inside one sweep are comparable with each other and with the sweep's own clean reference — not with a Z
computed with another T. Each scoring run holds the model lock only for itself, so a long sweep never
blocks other sessions for more than one run.

What these experiments can and cannot show (CRM §4.4): a change in Z under noise shows the perturbed layers
carry information the context-vs-no-context contrast depends on *for this prompt*; no change does not show
they carry none (residual connections let later layers recover — the paper's reason single-position
patching had negligible effect, and why single layers can look immune while the block is not).
"""

from __future__ import annotations

import difflib
import importlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from core.maths.divergence import kl_divergence, log_probs
from core.engine.dual_path import (
    DualPathSettings,
    PreparedPrompts,
    generate_greedy,
    prepare_prompts,
    run_dual_path,
    teacher_forced_logits,
)
from core.methods.ablation.interventions import (
    Intervention,
    NoiseSpec,
    PatchSpec,
    capture_layer_outputs,
    decoder_stack,
    format_layers,
    noise_injection,
    parse_layers,
)
from core.model.loading import ModelHandle
from core.methods.repcs import repcs_score
from core.engine.result import DualPathResult

logger = logging.getLogger(__name__)

SWEEP_MAX_NEW_TOKENS = 16
"""Answer tokens per scoring run in sweeps (and their T): affordable on a CPU."""

DEFAULT_EPS_GRID = (0.0, 0.1, 0.25, 0.5, 1.0)
DEFAULT_SEEDS = (0, 1, 2)
MAX_RUNS = 2000
"""Refuse sweeps with more scoring runs than this (a typo guard)."""

ProgressCallback = Callable[[int, int, str], None]
"""``progress(done, total, label)`` after each scoring run."""


# ----------------------------------------------------------------------------------------------------------
# Small pure helpers


def sweep_settings(settings: DualPathSettings, max_new_tokens: int = SWEEP_MAX_NEW_TOKENS) -> DualPathSettings:
    """The settings of a sweep's scoring runs: ``max_new_tokens`` answer tokens, T = ``max_new_tokens``."""
    out = replace(settings, max_new_tokens=int(max_new_tokens), score_window=int(max_new_tokens), force_length=False)
    out.validate()
    return out


def token_changes(clean_ids: Sequence[int], new_ids: Sequence[int]) -> list[bool]:
    """For each token of ``new_ids``: is it *not* part of an unchanged stretch of ``clean_ids``?

    Tokens are aligned with :class:`difflib.SequenceMatcher` (no junk heuristic), so one inserted token does
    not mark everything after it as changed.
    """
    changed = [True] * len(new_ids)
    matcher = difflib.SequenceMatcher(a=list(clean_ids), b=list(new_ids), autojunk=False)
    for tag, _i1, _i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            for j in range(j1, j2):
                changed[j] = False
    return changed


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first position where two token sequences differ (``None`` when they are identical)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _validate_eps_grid(eps_grid: Sequence[float]) -> list[float]:
    grid = sorted({float(e) for e in eps_grid})
    if not grid:
        raise ValueError("The ε grid is empty.")
    if any(not np.isfinite(e) or e < 0 for e in grid):
        raise ValueError(f"ε values must be finite and >= 0, got {list(eps_grid)}")
    return grid


def _validate_seeds(seeds: Sequence[int]) -> list[int]:
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


# ----------------------------------------------------------------------------------------------------------
# One scoring run


@dataclass(frozen=True)
class ScoredRun:
    """The outcome of one scoring run (under whatever interventions were active).

    Attributes:
        z: Z = Σ_{t<T} KL(P_rag,t ‖ P_para,t) on this run's own retrieval answer, nats.
        token_kl: KL_t, shape ``(n,)``, nats.
        answer_ids: the retrieval answer generated in this run.
        answer: its text.
        first_token_logprob: log P_rag(clean first answer token | retrieval prompt), nats.
        first_token_logprob_para: log P_para(clean first answer token | parametric prompt), nats.
        finish: ``"eos"`` or ``"length"``.
    """

    z: float
    token_kl: np.ndarray
    answer_ids: list[int]
    answer: str
    first_token_logprob: float
    first_token_logprob_para: float
    finish: str


def score_run(
    handle: ModelHandle, prepared: PreparedPrompts, settings: DualPathSettings, clean_first_token: int | None = None
) -> ScoredRun:
    """Generate the retrieval answer greedily and score it against the teacher-forced parametric path.

    The same maths as :func:`core.engine.run_dual_path` with ``free_parametric=False``, plus the
    log-probability both paths give the clean answer's first token (``clean_first_token``; default: this
    run's own first token). Holds ``handle.lock`` for both passes.
    """
    with handle.lock:
        ((ids, rag_logits, finish),) = generate_greedy(handle, [prepared.retrieval.ids], settings)
        para_logits = teacher_forced_logits(handle, prepared.parametric.ids, ids)
    lp_rag, lp_para = log_probs(rag_logits), log_probs(para_logits.to(rag_logits.device))
    token_kl = kl_divergence(lp_rag, lp_para).cpu().numpy()
    first = int(ids[0] if clean_first_token is None else clean_first_token)
    return ScoredRun(
        z=repcs_score(token_kl, settings.score_window),
        token_kl=token_kl,
        answer_ids=[int(i) for i in ids],
        answer=handle.tokenizer.decode(ids, skip_special_tokens=True).strip(),
        first_token_logprob=float(lp_rag[0, first].item()),
        first_token_logprob_para=float(lp_para[0, first].item()),
        finish=finish,
    )


def first_token_logprob(handle: ModelHandle, prompt_ids: Sequence[int], token: int) -> float:
    """log P(token | prompt) from one forward pass (under whatever interventions are active), nats."""
    x = torch.tensor([list(prompt_ids)], dtype=torch.long, device=handle.device)
    with handle.lock, torch.inference_mode():
        try:
            logits = handle.model(input_ids=x, use_cache=False, logits_to_keep=1).logits[0, -1]
        except TypeError:  # a model class without logits_to_keep
            logits = handle.model(input_ids=x, use_cache=False).logits[0, -1]
    return float(log_probs(logits)[int(token)].item())


# ----------------------------------------------------------------------------------------------------------
# Dose–response and single-layer sweeps


@dataclass
class NoiseGrid:
    """Scoring runs under noise over a grid of conditions × seeds, with the clean reference.

    ``kind`` is ``"dose_response"`` (conditions = ε values, one block of ``layers``) or ``"layer_sweep"``
    (conditions = single layers, one ε). Arrays have shape ``(n_conditions, n_seeds)``.

    Attributes:
        z: Z of each run (nats, T = ``settings["score_window"]``).
        first_token_logprob: log P_rag(clean first answer token), nats.
        first_token_logprob_para: log P_para(clean first answer token), nats.
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
    progress: ProgressCallback | None,
) -> NoiseGrid:
    s = sweep_settings(settings, max_new_tokens)
    prepared = prepare_prompts(handle, query, context, s)
    n_runs = 1 + sum(len(seeds) for _, e in runs if e > 0)
    if n_runs > MAX_RUNS:
        raise ValueError(f"{n_runs} scoring runs requested; the limit is {MAX_RUNS}. Use fewer seeds or conditions.")
    t0 = time.perf_counter()
    done = 0
    clean = score_run(handle, prepared, s)
    done += 1
    if progress is not None:
        progress(done, n_runs, "clean reference")
    first = clean.answer_ids[0]
    shape = (len(runs), len(seeds))
    z = np.zeros(shape)
    lp = np.zeros(shape)
    lp_para = np.zeros(shape)
    changed = np.zeros(shape, dtype=bool)
    lengths = np.zeros(shape, dtype=np.int64)
    answers: list[list[str]] = []
    for i, (run_layers, e) in enumerate(runs):
        row: list[str] = []
        for j, seed in enumerate(seeds):
            if e == 0:
                rec = clean  # ε = 0 adds exact zeros: the run is the clean run (tests check this)
            else:
                with noise_injection(handle, run_layers, e, seed):
                    rec = score_run(handle, prepared, s, first)
                done += 1
                if progress is not None:
                    progress(done, n_runs, f"layers {format_layers(run_layers)} · ε = {e:g} · seed {seed}")
            z[i, j] = rec.z
            lp[i, j] = rec.first_token_logprob
            lp_para[i, j] = rec.first_token_logprob_para
            changed[i, j] = rec.answer_ids != clean.answer_ids
            lengths[i, j] = len(rec.answer_ids)
            row.append(rec.answer)
        answers.append(row)
    elapsed = time.perf_counter() - t0
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
        answers=answers,
        clean_z=clean.z,
        clean_first_token_logprob=clean.first_token_logprob,
        clean_first_token_logprob_para=clean.first_token_logprob_para,
        clean_answer=clean.answer,
        clean_first_token=handle.decode_tokens([first])[0],
        clean_n_tokens=len(clean.answer_ids),
        settings=s.to_dict(),
        model=handle.info.name,
        query=prepared.query,
        context=prepared.context,
        timings={"total_s": elapsed, "runs": float(n_runs), "per_run_s": elapsed / n_runs},
    )


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
    progress: ProgressCallback | None = None,
) -> NoiseGrid:
    """Z and log P(first clean answer token) against ε for noise on one block of layers.

    For each ε in the grid and each seed: h′ = h + ε·σ(h)·N(0, 1) at the output of every layer of the block
    (CRM §4.4), retrieval answer re-generated, Z scored. ε = 0 is the clean run itself (no noise is
    drawn; identical to a hooked run with ε = 0). ``1 + (#ε>0)·#seeds`` scoring runs.

    Raises:
        ValueError: bad layers, ε, seeds or inputs.
    """
    n = len(decoder_stack(handle.model)[1])
    block = parse_layers(layers, n)
    grid = _validate_eps_grid(eps_grid)
    seed_list = _validate_seeds(seeds)
    for e in grid:
        NoiseSpec(tuple(block), e, seed_list[0]).validate(n)
    return _noise_grid(
        handle, query, context, settings, kind="dose_response", runs=[(block, e) for e in grid], conditions=grid,
        layers=block, eps=grid, seeds=seed_list, max_new_tokens=max_new_tokens, progress=progress,
    )


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
    progress: ProgressCallback | None = None,
) -> NoiseGrid:
    """Noise on one decoder layer at a time at a fixed ε: ΔZ per layer (CRM appendix J, Table 16).

    ``1 + #layers·#seeds`` scoring runs (``layers`` default: every decoder layer).
    """
    n = len(decoder_stack(handle.model)[1])
    chosen = list(range(n)) if layers is None else parse_layers(layers, n)
    seed_list = _validate_seeds(seeds)
    NoiseSpec(tuple(chosen), float(eps), seed_list[0]).validate(n)
    if float(eps) == 0:
        raise ValueError("A sweep at ε = 0 is the clean run for every layer; choose ε > 0.")
    return _noise_grid(
        handle, query, context, settings, kind="layer_sweep", runs=[([layer], float(eps)) for layer in chosen],
        conditions=chosen, layers=chosen, eps=[float(eps)], seeds=seed_list, max_new_tokens=max_new_tokens,
        progress=progress,
    )


def patching_scores(
    handle: ModelHandle,
    query: str,
    context: str,
    settings: DualPathSettings,
    layers: str | Sequence[int],
    *,
    max_new_tokens: int = SWEEP_MAX_NEW_TOKENS,
) -> dict[str, Any]:
    """Z with activation patching on ``layers`` against the clean Z (same short settings as the sweeps).

    Returns a JSON-ready dict with the clean and patched Z, ΔZ, answers and first-token log-probs.
    """
    n = len(decoder_stack(handle.model)[1])
    chosen = parse_layers(layers, n)
    s = sweep_settings(settings, max_new_tokens)
    prepared = prepare_prompts(handle, query, context, s)
    t0 = time.perf_counter()
    clean = score_run(handle, prepared, s)
    spec = PatchSpec(tuple(chosen), tuple(prepared.parametric.ids), tuple(prepared.retrieval.ids))
    with Intervention(handle, patch=spec) as iv:
        patched = score_run(handle, prepared, s, clean.answer_ids[0])
    return {
        "kind": "patching",
        "model": handle.info.name,
        "layers": chosen,
        "layers_spec": format_layers(chosen),
        "settings": s.to_dict(),
        "clean": {"z": clean.z, "answer": clean.answer, "first_token_logprob": clean.first_token_logprob},
        "patched": {
            "z": patched.z,
            "answer": patched.answer,
            "first_token_logprob": patched.first_token_logprob,
            "answer_changed": patched.answer_ids != clean.answer_ids,
        },
        "delta_z": patched.z - clean.z,
        "intervention": iv.describe(),
        "timings": {"total_s": time.perf_counter() - t0},
    }


# ----------------------------------------------------------------------------------------------------------
# Per-layer trajectory (CRM level 3) — uses core.internals / core.crm when they are available


@dataclass
class Trajectory:
    """A per-layer quantity of the displacement d_ℓ = h_ℓ(context) − h_ℓ(no context) at the last prompt token.

    Attributes:
        kind: ``"lts"`` (LTS_ℓ = ⟨d_ℓ, v_ℓ⟩ on the calibrated CRM basis) or ``"l2"`` (‖d_ℓ‖₂, when no
            basis is available).
        values: shape ``(L + 1,)``; index 0 is the embedding output, index ℓ + 1 decoder layer ℓ.
        note: what was computed and why (shown under the chart).
        flagged: decoder layers the CRM anomaly rule flags (empty without a basis).
    """

    kind: str
    values: np.ndarray
    note: str
    flagged: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "values": np.asarray(self.values, dtype=np.float64).tolist(), "note": self.note,
                "flagged": list(self.flagged)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trajectory:
        return cls(str(data["kind"]), np.asarray(data["values"], dtype=np.float64), str(data.get("note", "")),
                   [int(x) for x in data.get("flagged", [])])


def _optional(module: str, name: str) -> Any | None:
    """``module.name`` if that module exists and defines it (issue 3's CRM code), else ``None``."""
    try:
        return getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None


def _own_displacement(handle: ModelHandle, result: DualPathResult) -> np.ndarray:
    """d_ℓ = h_ℓ(context) − h_ℓ(no context) at each prompt's last token, ``(L + 1, d)`` float64.

    Fallback when :mod:`core.internals` is missing: row 0 is the embedding output, row ℓ + 1 the raw output
    of decoder layer ℓ (before the final norm), captured after any active interventions.
    """
    settings = DualPathSettings(**{k: v for k, v in result.settings.items() if k in DualPathSettings.__dataclass_fields__})
    prepared = prepare_prompts(handle, result.query, result.context, settings)
    n = len(decoder_stack(handle.model)[1])
    states = []
    for ids in (prepared.retrieval.ids, prepared.parametric.ids):
        x = torch.tensor([ids], dtype=torch.long, device=handle.device)
        with handle.lock, torch.inference_mode(), capture_layer_outputs(handle, range(n)) as rec:
            emb = handle.model.get_input_embeddings()(x)[0, -1]
            handle.model(input_ids=x, use_cache=False)
            rows = [emb] + [rec[layer][-1][0, -1] for layer in range(n)]
        states.append(torch.stack([r.double().cpu() for r in rows]).numpy())
    return states[0] - states[1]


def displacement(handle: ModelHandle, result: DualPathResult) -> np.ndarray:
    """d_ℓ for every hidden state (``core.internals.displacement`` when available), ``(L + 1, d)``.

    Runs forward passes through ``handle``, so inside an intervention context it gives the perturbed d_ℓ.
    """
    fn = _optional("core.methods.internals", "displacement")
    if fn is not None:
        return np.asarray(fn(handle, result), dtype=np.float64)
    return _own_displacement(handle, result)


def _basis(handle: ModelHandle, template: str = "auto") -> Any | None:
    """The calibrated CRM basis of this model and template (``core.crm.load_basis``), or ``None``."""
    load = _optional("core.methods.crm.legacy", "load_basis")
    if load is None:
        return None
    try:
        return load(handle, template)
    except (OSError, ValueError) as exc:
        logger.warning("CRM basis could not be loaded: %s", exc)
        return None


def _as_decoder_layers(flagged: Sequence[int], n_layers: int) -> list[int]:
    """Flagged indices of an ``(L + 1,)`` trajectory (0 = embeddings) → decoder layers (0-based)."""
    return sorted({int(i) - 1 for i in flagged if 1 <= int(i) <= n_layers})


def layer_trajectory(handle: ModelHandle, result: DualPathResult, basis: Any | None = None) -> Trajectory:
    """LTS_ℓ on the CRM basis if one is calibrated for this model, else ‖d_ℓ‖₂ (with a note saying so)."""
    d = displacement(handle, result)
    basis = basis if basis is not None else _basis(handle, str(result.settings.get("template", "auto")))
    n_layers = handle.info.n_layers
    if basis is not None:
        lts = np.asarray(basis.lts(d), dtype=np.float64)
        flagged = _as_decoder_layers(basis.flagged(lts), n_layers)
        return Trajectory("lts", lts, "LTS_ℓ = ⟨d_ℓ, v_ℓ⟩ on the calibrated PC1 direction of each layer.", flagged)
    return Trajectory(
        "l2",
        np.linalg.norm(d, axis=1),
        "No CRM basis is calibrated for this model, so the chart shows ‖d_ℓ‖₂, the length of the displacement "
        "at each layer, instead of its projection on PC1 (LTS).",
    )


def flagged_layers(handle: ModelHandle, clean: DualPathResult) -> list[int] | None:
    """The decoder layers the CRM anomaly rule flags for this clean run (``None`` without a basis)."""
    basis = _basis(handle, str(clean.settings.get("template", "auto")))
    if basis is None:
        return None
    return layer_trajectory(handle, clean, basis).flagged


# ----------------------------------------------------------------------------------------------------------
# A full perturbed dual-path run, for display


def perturbed_run(
    handle: ModelHandle,
    query: str,
    context: str,
    settings: DualPathSettings,
    *,
    noise: NoiseSpec | None = None,
    patch_layers: Sequence[int] | None = None,
    clean_first_token: int | None = None,
    trajectory: bool = True,
) -> DualPathResult:
    """:func:`core.engine.run_dual_path` under noise and/or activation patching.

    Both answers are re-generated under the intervention; the result's ``extras`` get ``intervention`` (the
    specs and what was done), ``first_token_logprob`` (log P_rag of ``clean_first_token`` under the
    intervention) and ``trajectory`` (:class:`Trajectory` of the perturbed displacement) — all computed
    inside the same hooked, locked block.
    """
    prepared = prepare_prompts(handle, query, context, settings)
    patch = None
    if patch_layers:
        patch = PatchSpec(tuple(int(x) for x in patch_layers), tuple(prepared.parametric.ids), tuple(prepared.retrieval.ids))
    with Intervention(handle, noise=noise, patch=patch) as iv:
        result = run_dual_path(handle, query, context, settings, free_parametric=True)
        token = clean_first_token if clean_first_token is not None else (result.answer_token_ids or [None])[0]
        lp = first_token_logprob(handle, prepared.retrieval.ids, token) if token is not None else None
        traj = layer_trajectory(handle, result) if trajectory else None
    result.extras["intervention"] = iv.describe()
    result.extras["first_token_logprob"] = lp
    if traj is not None:
        result.extras["trajectory"] = traj.to_dict()
    if patch is not None and iv.stats.patched_sites == 0:
        result.warnings.append("Activation patching found no place to patch: the retrieval prompt was never processed.")
    return result


def compare(clean: DualPathResult, perturbed: DualPathResult) -> dict[str, Any]:
    """What changed between a clean and a perturbed result (JSON-ready)."""
    rag_changed = token_changes(clean.answer_token_ids, perturbed.answer_token_ids)
    para_changed = token_changes(clean.parametric.token_ids, perturbed.parametric.token_ids)
    return {
        "z_clean": clean.repcs_score,
        "z_perturbed": perturbed.repcs_score,
        "delta_z": perturbed.repcs_score - clean.repcs_score,
        "verdict_clean": clean.verdict,
        "verdict_perturbed": perturbed.verdict,
        "rag_answer_changed": clean.answer_token_ids != perturbed.answer_token_ids,
        "parametric_answer_changed": clean.parametric.token_ids != perturbed.parametric.token_ids,
        "rag_first_difference": first_difference(clean.answer_token_ids, perturbed.answer_token_ids),
        "parametric_first_difference": first_difference(clean.parametric.token_ids, perturbed.parametric.token_ids),
        "rag_changed_tokens": int(sum(rag_changed)),
        "parametric_changed_tokens": int(sum(para_changed)),
        "rag_changed": rag_changed,
        "parametric_changed": para_changed,
    }
