"""Scoring audit requests: validated pairs → CRM trajectory, the audit rule and the cheap extras, per pair.

The paper's prototype (CRM appendix V.1) returns ``{anomaly_flag, anomaly_score, lts_trajectory,
flagged_layers, latency_ms}`` from one forward pass per path. Here the same two passes (batched over the pairs
of ``/audit/batch``, :mod:`core.audit.forward`) also give, at no extra model cost:

* ``displacement_norm``: ‖d_ℓ‖ per layer (CRM appendix E's magnitude baseline);
* ``first_token``: KL(P_rag ‖ P_para) of the first answer token (nats), both entropies and both paths' most
  likely first token.

Nothing is generated unless the request asks for it (``generate``): then the engine's batched dual path
(:func:`core.engine.batch.score_rows`: one batched generate + one teacher-forced forward per batch) adds the
retrieval answer, RePCS' Z, τ and the verdict.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.audit.budget import RunShare, WorkMeter
from core.audit.calibration import AuditCalibration
from core.audit.forward import DEFAULT_AUDIT_BATCH, MAX_AUDIT_BATCH_TOKENS, capture_pairs
from core.engine.batch import score_rows
from core.engine.prepare import PreparedPrompts, prepare_prompts
from core.engine.settings import DualPathSettings
from core.model.handle import ModelHandle


class AuditInputError(ValueError):
    """A pair the audit refuses before any model call.

    Attributes:
        index: the pair's position in the request (0 for ``/audit``).
        field: the request field at fault (``"query"``, ``"context"``).
        kind: ``"invalid"`` (malformed or empty: HTTP 422), ``"token_budget"`` (a pair too long: HTTP 413) or
            ``"work_budget"`` (the request over its token budget: HTTP 413).
    """

    def __init__(self, message: str, *, index: int, field: str, kind: str) -> None:
        super().__init__(message)
        self.index = index
        self.field = field
        self.kind = kind


@dataclass(frozen=True)
class AuditOptions:
    """How the pairs of one request are scored.

    Attributes:
        template: the server's prompt template (``"auto"`` or a key); must match the calibration's.
        max_prompt_tokens: the server's cap on a prompt's length (≤ the model's token budget).
        batch_size, max_batch_tokens: the padded forwards' size limits.
        generate: also run the dual path (answer, Z, verdict); ``max_new_tokens`` then bounds the answer.
    """

    template: str = "auto"
    max_prompt_tokens: int | None = None
    batch_size: int = DEFAULT_AUDIT_BATCH
    max_batch_tokens: int = MAX_AUDIT_BATCH_TOKENS
    generate: bool = False
    max_new_tokens: int = 32


def prepare_pairs(
    handle: ModelHandle,
    pairs: Sequence[tuple[str, str]],
    options: AuditOptions,
    *,
    max_total_tokens: int | None = None,
) -> list[PreparedPrompts]:
    """Validate every pair and build both prompts (no model call); all or nothing.

    Args:
        max_total_tokens: the request's work budget in tokens (both prompts of every pair, plus the answer tokens
            asked for): pairs are counted as they are tokenized, and the request is refused as soon as the running
            total is over it — a batch far over the budget costs the server only the tokenizing of its first
            items, not of all of them.

    Raises:
        AuditInputError: an empty query/context (``invalid``), a prompt over the per-pair budget
            (``token_budget``) or the request over ``max_total_tokens`` (``work_budget``); the message names the
            pair and the limit.
    """
    new_tokens = options.max_new_tokens if options.generate else 1
    answer_tokens = 2 * options.max_new_tokens if options.generate else 0
    total = 0
    settings = DualPathSettings(max_new_tokens=new_tokens, score_window=new_tokens, template=options.template)
    cap = min(handle.info.max_tokens, options.max_prompt_tokens or handle.info.max_tokens)
    out: list[PreparedPrompts] = []
    where = (lambda i: f"item {i}: ") if len(pairs) > 1 else (lambda i: "")
    for i, (query, context) in enumerate(pairs):
        for name, text in (("query", query), ("context", context)):
            if not isinstance(text, str) or not text.strip():
                raise AuditInputError(f"{where(i)}{name} is empty", index=i, field=name, kind="invalid")
        try:
            prepared = prepare_prompts(handle, query, context, settings)
        except ValueError as exc:
            kind = "token_budget" if str(exc).startswith("Too long") else "invalid"
            field = "context" if kind == "token_budget" or "context" in str(exc).lower() else "query"
            raise AuditInputError(f"{where(i)}{exc}", index=i, field=field, kind=kind) from exc
        n = len(prepared.retrieval.ids) + new_tokens
        if n > cap:
            raise AuditInputError(
                f"{where(i)}the retrieval prompt is {len(prepared.retrieval.ids):,} tokens (+{new_tokens} "
                f"generated), over this server's limit of {cap:,} tokens per pair; shorten the context by at "
                f"least {n - cap:,} tokens (nothing is cut automatically).",
                index=i,
                field="context",
                kind="token_budget",
            )
        total += len(prepared.retrieval.ids) + len(prepared.parametric.ids) + answer_tokens
        if max_total_tokens is not None and total > max_total_tokens:
            counted = f"items 0–{i} of {len(pairs)} already ask" if len(pairs) > 1 else "this pair asks"
            raise AuditInputError(
                f"{counted} the model to read {total:,} tokens (both prompts of every item); this server takes at "
                f"most {max_total_tokens:,} per request: send fewer or shorter items. Nothing was run or stored.",
                index=i,
                field="context",
                kind="work_budget",
            )
        out.append(prepared)
    return out


def audit_pairs(
    handle: ModelHandle,
    calibration: AuditCalibration,
    pairs: Sequence[tuple[str, str]],
    options: AuditOptions | None = None,
    *,
    prepared: Sequence[PreparedPrompts] | None = None,
    meter: WorkMeter | None = None,
    share: RunShare | None = None,
) -> list[dict[str, Any]]:
    """Audit (query, context) pairs: one padded forward pass per path per chunk, then the audit rule.

    Args:
        calibration: the PC1 basis, μ/σ and s_α in force (its template must be the options' resolved one).
        prepared: the pairs' prompts when already validated by :func:`prepare_pairs`.
        meter: the service's :class:`~core.audit.budget.WorkMeter`: forward passes are sized to its fair slice
            and timed into it; with ``generate``, rows are generated in batches it estimates fit a slice (at
            least one row: a generation holds the model from its first to its last token).
        share: the audit's turn-taking among the service's audits (:class:`~core.audit.budget.RunShare`): each
            forward pass, and each batch of generations, waits for its turn.

    Returns:
        One JSON-ready result per pair: ``anomaly_flag``, ``anomaly_score``, ``lts_trajectory`` (``L1``
        floats, row 0 = embeddings), ``flagged_layers`` (hidden-state rows outside μ ± 2σ),
        ``displacement_norm``, ``first_token``, ``tokens``, ``template``, ``warnings`` and ``generation``
        (``None`` unless asked).

    Raises:
        AuditInputError: see :func:`prepare_pairs`.
        ValueError: the prompts' template is not the calibration's.
    """
    options = options or AuditOptions()
    prepared = list(prepared) if prepared is not None else prepare_pairs(handle, pairs, options)
    if prepared and prepared[0].template_key != calibration.template:
        raise ValueError(
            f"the prompts use template {prepared[0].template_key!r} but the calibration {calibration.template!r}"
        )
    captures = capture_pairs(
        handle,
        prepared,
        batch_size=options.batch_size,
        max_batch_tokens=options.max_batch_tokens,
        meter=meter,
        share=share,
    )
    generated = _generations(handle, pairs, prepared, options, meter, share)
    return [_audit_row(handle, calibration, p, c, g) for p, c, g in zip(prepared, captures, generated)]


def _generations(
    handle: ModelHandle,
    pairs: Sequence[tuple[str, str]],
    prepared: Sequence[PreparedPrompts],
    options: AuditOptions,
    meter: WorkMeter | None,
    share: RunShare | None,
) -> list[Any]:
    """The dual path of every pair when the request asks to generate (else ``None`` each), in groups of rows the
    meter estimates fit one fair slice, each group in its own turn."""
    if not (options.generate and prepared):
        return [None] * len(prepared)
    settings = DualPathSettings(
        max_new_tokens=options.max_new_tokens, score_window=options.max_new_tokens, template=options.template
    )
    rows, one_row = options.batch_size, 0.0
    if meter is not None:
        widest = max(len(p.retrieval.ids) for p in prepared)
        one_row = meter.plan([widest], [widest], batch_size=1, new_tokens=options.max_new_tokens).seconds
        rows = max(1, min(rows, int(meter.slice_s / one_row) if one_row > 0 else rows))
    generated: list[Any] = []
    for start in range(0, len(pairs), rows):  # each group of rows in its own turn
        group = list(pairs[start : start + rows])
        with share.block(one_row * len(group)) if share is not None else nullcontext():
            generated += score_rows(handle, group, settings, batch_size=rows)
    return generated


def _audit_row(handle: ModelHandle, calibration: AuditCalibration, prep: PreparedPrompts, cap: Any, gen: Any) -> dict:
    """One pair's JSON-ready result (see :func:`audit_pairs`)."""
    lts = calibration.lts(cap.displacement)
    rule = calibration.evaluate(lts)
    decode = handle.tokenizer.decode
    return {
        "anomaly_flag": rule["anomaly_flag"],
        "anomaly_score": round(float(rule["anomaly_score"]), 6),
        "lts_trajectory": np.round(lts, 6).tolist(),
        "flagged_layers": rule["flagged_layers"],
        "displacement_norm": np.round(np.linalg.norm(cap.displacement.astype(np.float64), axis=-1), 6).tolist(),
        "first_token": {
            "kl": round(cap.first_token_kl, 6),
            "entropy_retrieval": round(cap.entropy_retrieval, 6),
            "entropy_parametric": round(cap.entropy_parametric, 6),
            "top_retrieval": decode([cap.top_retrieval]),
            "top_parametric": decode([cap.top_parametric]),
        },
        "tokens": {"retrieval": cap.n_retrieval, "parametric": cap.n_parametric},
        "template": prep.template_key,
        "warnings": list(prep.warnings),
        "generation": None if gen is None else _generation(gen),
    }


def _generation(result: Any) -> dict[str, Any]:
    """The dual path's answer and RePCS verdict (only when the request asked to generate)."""
    return {
        "answer": result.retrieval.answer,
        "n_tokens": result.n_tokens,
        "repcs_score": round(float(result.repcs_score), 6),
        "threshold": None if result.threshold is None else round(float(result.threshold), 6),
        "verdict": result.repcs_verdict,  # RePCS' (the result's `verdict` is the headline's)
        "threshold_source": result.threshold_source,  # e.g. "not calibrated for this model: no τ …"
        "model_calibration_id": result.calibration_id,  # the record that decided it: "<slug>/<template>"
    }
