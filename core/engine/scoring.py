"""From both paths' logits to a :class:`~core.engine.result.DualPathResult` (docs/architecture.md,
"The dual-path protocol").

* :func:`score_paths` — per position t of the retrieval answer: KL_t = KL(P_retrieval,t ‖ P_parametric,t)
  over the full vocabulary (nats, float32 log-space), each path's entropy, the log-probability of the answer
  token and the top-k candidates.
* :func:`build_result` — the result of one row from its parts, with Z = Σ_{t<T} KL_t (RePCS eq. 2), RePCS'
  verdict (:func:`core.engine.verdict.decide`: τ(L) with its inconclusive band, or the paper's constant τ), the
  CRM level-2 statistics and the two-axis headline (:func:`core.engine.axes.headline`, the result's ``verdict``).
  :func:`core.engine.dual_path.run_dual_path` and the
  batched :func:`core.engine.batch.score_batch` both build their results here, so they agree by construction.
* :func:`rejudge` — the same result under another τ: RePCS' verdict re-decided from the Z and L it already
  holds (no model call), with exactly the fields :func:`build_result` would have written under that τ (the
  headline does not depend on τ: it is kept).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np
import torch

from core.engine.axes import headline
from core.engine.calibration_record import ModelCalibration, record_for
from core.engine.prepare import PreparedPrompts, Prompt
from core.engine.result import DualPathResult, PathOutput
from core.engine.settings import DualPathSettings
from core.engine.tau_resolution import tau_in_force
from core.engine.threshold import TAU_PAPER, Threshold, repcs_score
from core.engine.verdict import UNCALIBRATED, decide
from core.maths.divergence import entropy, kl_divergence, kl_statistics, log_probs
from core.model.handle import ModelHandle
from core.model.prompts import resolve_template


class Answer(NamedTuple):
    """One path's greedy answer: its token ids and why it stopped (``"eos"``, ``"turn"``, ``"length"``,
    ``"not generated"``)."""

    token_ids: list[int]
    finish: str


NOT_GENERATED = Answer([], "not generated")
"""The parametric answer of a run that did not generate it (scoring never needs it)."""


@dataclass(frozen=True)
class PathStats:
    """One path's per-position statistics over the retrieval answer (``n`` positions, top ``k``), CPU numpy.

    Attributes:
        entropy: ``(n,)`` float32, nats.
        logprob: ``(n,)`` float32 log-probability of the retrieval answer's token.
        topk_ids: ``(n, k)`` int64; ``topk_probs``: ``(n, k)`` float32.
    """

    entropy: np.ndarray
    logprob: np.ndarray
    topk_ids: np.ndarray
    topk_probs: np.ndarray


@dataclass(frozen=True)
class PathScores:
    """:func:`score_paths` of one row: ``token_kl`` ``(n,)`` float32 (nats) and each path's :class:`PathStats`."""

    token_kl: np.ndarray
    retrieval: PathStats
    parametric: PathStats
    vocab_log_ratio: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32))
    """``(n,)`` float32: max over the vocabulary entries that enter KL_t (P_retrieval > 0) of
    |log P_retrieval − log P_parametric| — RePCS Lemma III.3's per-token log-ratio, whose bound is γ."""


def _path_stats(logp: torch.Tensor, index: torch.Tensor, k: int) -> PathStats:
    k = min(k, logp.shape[-1])
    values, ids = torch.topk(logp, k, dim=-1)
    return PathStats(
        entropy=entropy(logp).cpu().numpy(),
        logprob=logp.gather(-1, index).squeeze(-1).cpu().numpy(),
        topk_ids=ids.cpu().numpy().astype(np.int64),
        topk_probs=values.exp().cpu().numpy().astype(np.float32),
    )


def score_paths(
    retrieval_logits: torch.Tensor, parametric_logits: torch.Tensor, answer_ids: list[int], top_k: int
) -> PathScores:
    """Per-position KL, entropies, answer-token log-probs and top-k of both paths (float32, CPU numpy).

    Args:
        retrieval_logits, parametric_logits: ``(n, V)`` logits predicting ``answer_ids`` on each path.
        answer_ids: the ``n`` retrieval answer tokens.
        top_k: candidates kept per position.

    Raises:
        ValueError: the two logit tensors differ in shape, or their rows do not match the answer.
    """
    if retrieval_logits.shape != parametric_logits.shape:
        raise ValueError(
            f"path logits differ in shape: {tuple(retrieval_logits.shape)} vs {tuple(parametric_logits.shape)}"
        )
    if retrieval_logits.shape[0] != len(answer_ids):
        raise ValueError(f"{retrieval_logits.shape[0]} logit rows for {len(answer_ids)} answer tokens")
    lp_retrieval = log_probs(retrieval_logits)
    lp_parametric = log_probs(parametric_logits.to(retrieval_logits.device))
    index = torch.tensor(answer_ids, dtype=torch.long, device=lp_retrieval.device).unsqueeze(-1)
    ratio = (lp_retrieval - lp_parametric).abs()
    ratio = torch.where(torch.isfinite(lp_retrieval), ratio, torch.zeros_like(ratio))  # P_rag = 0: not in the KL
    return PathScores(
        token_kl=kl_divergence(lp_retrieval, lp_parametric).cpu().numpy(),
        retrieval=_path_stats(lp_retrieval, index, top_k),
        parametric=_path_stats(lp_parametric, index, top_k),
        vocab_log_ratio=ratio.amax(dim=-1).float().cpu().numpy() if ratio.numel() else np.zeros(0, np.float32),
    )


def _resolved_template(key: str, tokenizer: Any, auto: str | None = None) -> str:
    """The template key ``key`` resolves to for ``tokenizer`` (``"auto"`` → ``"chat"`` or ``"A"``); without a
    tokenizer, ``"auto"`` is ``auto`` when given (the key a run of that model resolved it to), and any other key
    is itself; a key that cannot be resolved is itself."""
    if tokenizer is None:
        return auto if key == "auto" and auto else key
    try:
        return resolve_template(key, tokenizer).key
    except ValueError:
        return key


MISMATCH_OPENINGS = ("τ was calibrated with", "This τ has no length-aware calibration")
"""How every warning of :func:`calibration_mismatch` begins (:func:`rejudge` replaces them for the new τ)."""


def calibration_mismatch(
    threshold: Threshold, settings: DualPathSettings, tokenizer: Any = None, *, auto: str | None = None
) -> list[str]:
    """Warnings when a run's settings differ from those τ was calibrated with (τ is then not comparable).

    Templates are compared as resolved for ``tokenizer`` (the run's model): a τ calibrated with ``"auto"`` and a
    run with ``"chat"`` explicitly, which ``"auto"`` resolves to, do not warn. Without a tokenizer the setting
    strings are compared, ``"auto"`` read as ``auto`` when given.
    """
    out = []
    if settings.score_window != threshold.T:
        out.append(
            f"τ was calibrated with T = {threshold.T} answer tokens but this run sums T = {settings.score_window}; "
            "Z and τ are not on the same scale — recalibrate for this T or restore it."
        )
    if threshold.length_tau is None and (threshold.extra or {}).get("tau_mode") != TAU_PAPER:
        out.append(
            "This τ has no length-aware calibration (a file written before it existed): the verdict uses one "
            "constant τ and no inconclusive band — recalibrate to get τ(L)."
        )
    calibrated_template = (threshold.extra or {}).get("template")
    if calibrated_template and _resolved_template(calibrated_template, tokenizer, auto) != _resolved_template(
        settings.template, tokenizer, auto
    ):
        out.append(
            f"τ was calibrated with template {calibrated_template!r}, this run uses {settings.template!r}; "
            "the verdict may not transfer."
        )
    return out


def resolve_threshold(
    handle: ModelHandle,
    threshold: Threshold | None,
    threshold_source: str | None,
    calibration: ModelCalibration | None = None,
) -> tuple[Threshold | None, str | None]:
    """The τ to apply to a run of ``handle``'s model: :func:`core.engine.tau_resolution.tau_in_force` (the given
    one, else the τ of the model's calibration record ``calibration``, by default the record of its ``auto``
    template, :func:`core.engine.calibration_record.record_for`)."""
    record = calibration if calibration is not None else record_for(handle, "auto")
    given = threshold_source if threshold is not None else None  # no τ given: the record's τ says where it is from
    return tau_in_force(handle.info.name, threshold, given, calibration=record)


def _path_output(handle: ModelHandle, prompt: Prompt, answer: Answer, stats: PathStats) -> PathOutput:
    ids = answer.token_ids
    return PathOutput(
        prompt=prompt.prompt,
        prompt_len=len(prompt.ids),
        # a token limit can cut a multi-byte character: decode whole characters only (no trailing "\ufffd")
        answer=handle.tokenizer.decode(ids, skip_special_tokens=True).rstrip("\ufffd").strip() if ids else "",
        token_ids=[int(i) for i in ids],
        tokens=handle.decode_tokens(ids),
        finish=answer.finish,
        entropy=stats.entropy,
        logprob=stats.logprob,
        topk_ids=stats.topk_ids,
        topk_probs=stats.topk_probs,
        topk_tokens=[handle.decode_tokens(row) for row in stats.topk_ids.tolist()],
    )


def build_result(
    handle: ModelHandle,
    prepared: PreparedPrompts,
    settings: DualPathSettings,
    scores: PathScores,
    *,
    retrieval: Answer,
    parametric: Answer,
    threshold: Threshold | None,
    threshold_source: str | None,
    timings: dict[str, float],
    calibration: ModelCalibration | None = None,
) -> DualPathResult:
    """The :class:`DualPathResult` of one row from its parts, its two-axis headline attached (``axes``; the
    result's :attr:`~core.engine.result.DualPathResult.verdict`).

    Args:
        scores: :func:`score_paths` of the row.
        retrieval: the retrieval answer (the positions ``scores`` are over).
        parametric: the parametric path's free answer (:data:`NOT_GENERATED` when skipped).
        threshold: τ to apply (already resolved; ``None`` = uncalibrated); ``threshold_source`` says where from.
        timings: seconds per step, stored as they are.
        calibration: the model's calibration record, resolved once with the handle
            (:meth:`core.engine.batch.ScoreRequest.resolved`); the headline is decided under its axes and the
            result carries its key (``calibration_id``). Default: the record of the handle and the row's template.
    """
    record = calibration if calibration is not None else record_for(handle, prepared.template_key)
    window = min(settings.score_window, len(retrieval.token_ids))
    z = repcs_score(scores.token_kl, settings.score_window)
    warnings = list(prepared.warnings)
    if threshold is not None:
        warnings += calibration_mismatch(threshold, settings, handle.tokenizer)
    log_ratio = np.abs(scores.retrieval.logprob[:window].astype(np.float64) - scores.parametric.logprob[:window])
    result = DualPathResult(
        model=handle.info.name,
        model_info=handle.info.to_dict(),
        query=prepared.query,
        context=prepared.context,
        template=prepared.template_key,
        settings=settings.to_dict(),
        retrieval=_path_output(handle, prepared.retrieval, retrieval, scores.retrieval),
        parametric=_path_output(handle, prepared.parametric, parametric, scores.parametric),
        token_kl=scores.token_kl,
        score_window=settings.score_window,
        repcs_score=z,
        **judgement(z, window, threshold, threshold_source),
        n_scored=window,
        kl_stats=kl_statistics(scores.token_kl[:window], settings.kl_split),
        max_abs_log_ratio=float(log_ratio.max()) if log_ratio.size else 0.0,
        max_abs_log_ratio_vocab=(
            float(scores.vocab_log_ratio[:window].max()) if scores.vocab_log_ratio[:window].size else 0.0
        ),
        warnings=warnings,
        timings=timings,
        calibration_id=record.key,
    )
    result.attach_headline(headline(result, record))  # every result the engine makes carries its headline, once
    return result


def judgement(z: float, n_scored: int, threshold: Threshold | None, source: str | None) -> dict[str, Any]:
    """RePCS' verdict fields of a result (``threshold``, ``threshold_source``, ``repcs_verdict``,
    ``repcs_verdict_reason``, ``tau_band``, ``tau_mode``) for Z over L scored tokens under ``threshold``
    (:func:`decide`)."""
    decision = decide(z, n_scored, threshold)
    return {
        "threshold": decision.tau if threshold is not None else None,
        "threshold_source": source or ("given" if threshold is not None else "no threshold available"),
        "repcs_verdict": decision.verdict if threshold is not None else UNCALIBRATED,
        "repcs_verdict_reason": decision.reason,
        "tau_band": None if decision.band is None else [float(decision.band[0]), float(decision.band[1])],
        "tau_mode": decision.mode,
    }


def rejudge(
    result: DualPathResult, threshold: Threshold | None, source: str | None, tokenizer: Any = None
) -> DualPathResult:
    """``result`` as if it had been run under ``threshold``: RePCS' verdict re-decided from its own Z and L (no
    model call), the τ warnings replaced by the new τ's, everything else — the headline too — shared with ``result``.

    Under the τ it was run with, the verdict fields come out exactly as :func:`build_result` wrote them. Without
    ``tokenizer``, a template ``"auto"`` is read as the key the run resolved it to (``result.template``).
    """
    fields_now = judgement(result.repcs_score, result.n_scored, threshold, source)
    warnings = [w for w in result.warnings if not w.startswith(MISMATCH_OPENINGS)]
    if threshold is not None:
        warnings += calibration_mismatch(threshold, result.run_settings, tokenizer, auto=result.template)
    if warnings == result.warnings and all(getattr(result, k) == v for k, v in fields_now.items()):
        return result
    return replace(result, warnings=warnings, **fields_now)
