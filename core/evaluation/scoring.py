"""Scoring labeled or conflict rows: one batched dual-path run per batch, then every chosen detector per row.

:func:`score_records` turns one batch of rows into JSON-ready records (:func:`record_for`): the run's summary,
every detector's raw score (``None`` plus an entry in ``errors`` when a detector fails on a row: one failure
never loses the run) and, for detectors that need a fit, their per-row features (scored later out of fold by
:func:`core.evaluation.report.summarize`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from core.detectors import Detector, DetectorInput, resolve
from core.detectors.shared import plan, reads_the_run
from core.engine import DualPathResult, DualPathSettings, ScoreRequest, score_batch
from core.engine.swap import headline_span, run_swap_tests
from core.engine.swap_verdict import carry, own
from core.evaluation.data import ConflictRow, LabeledRow, Row
from core.evaluation.validity import axis1_verdict, text_only_verdict
from core.model.handle import ModelHandle

logger = logging.getLogger(__name__)


def answer_follows(answer: str, answer_context: str, answer_memory: str) -> str:
    """Which source an answer repeats: ``"context"``, ``"memory"``, ``"both"`` or ``"neither"``
    (case-insensitive containment of each expected answer)."""
    text = answer.casefold()
    ctx = bool(answer_context.strip()) and answer_context.strip().casefold() in text
    mem = bool(answer_memory.strip()) and answer_memory.strip().casefold() in text
    return "both" if ctx and mem else "context" if ctx else "memory" if mem else "neither"


def resolve_detectors(names: Sequence[str] | None) -> dict[str, Detector]:
    """The registered detectors for ``names`` (default ``["repcs"]``), in the given order.

    ``min_k_<k>`` / ``min_kpp_<k>`` exist for any 1 ≤ k ≤ 100.

    Raises:
        ValueError: an unknown name (the message lists the available ones).
    """
    return {d.name: d for d in resolve(list(names or ["repcs"]))}


def _finite(value: Any) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def record_for(
    handle: ModelHandle,
    result: DualPathResult,
    settings: DualPathSettings,
    detectors: dict[str, Detector],
    meta: dict[str, Any],
) -> dict[str, Any]:
    """One JSON-ready row record: the run's summary — ``verdict`` is the two-axis headline, as ``run --json`` and the
    Dual Path page give it (``axes``: both axes, the answer span), RePCS' own Z-vs-τ verdict is ``repcs_verdict``,
    ``text_only`` and ``axis1`` the verdicts of the two baselines that read less (:mod:`core.evaluation.validity`)
    —, every detector's raw score (``None`` + an entry in ``errors`` when a detector fails on this row) and, for
    fitted detectors, their per-row features."""
    inp = DetectorInput(handle=handle, result=result, settings=settings)
    plan(inp, detectors)  # which of them read the retrieval path's shared pass (core.detectors.shared)
    scores: dict[str, float | None] = {}
    features: dict[str, list[float]] = {}
    errors: dict[str, str] = {}
    for name, det in detectors.items():
        try:
            if det.needs_fit and det.features is not None:
                x = np.asarray(det.features(inp), dtype=np.float64).ravel()
                if not np.all(np.isfinite(x)):
                    raise ValueError("non-finite features")
                features[name] = x.tolist()
                scores[name] = None  # filled by summarize() from the other folds
            else:
                value = _finite(det.score(inp))
                if value is None:
                    raise ValueError("non-finite score")
                scores[name] = value
        except Exception as exc:  # noqa: BLE001 - one detector failing on one row must not lose the run
            logger.warning("detector %s failed on row %s: %s", name, meta.get("row"), exc)
            scores[name] = None
            errors[name] = f"{type(exc).__name__}: {exc}"
    head = result.head  # the headline decided when the result was built
    record: dict[str, Any] = {
        **{k: v for k, v in meta.items() if k != "extra"},
        "query": result.query,
        "context": result.context,
        "repcs_score": result.repcs_score,
        "verdict": head.verdict,
        "internals_verdict": own(head)["verdict"],
        "repcs_verdict": result.repcs_verdict,
        "axes": head.to_dict(),
        "text_only": text_only_verdict(result.query, result.context, result.retrieval.answer, result.parametric.answer),
        "axis1": axis1_verdict(head.reliance.state),
        "rag_answer": result.retrieval.answer,
        "parametric_answer": result.parametric.answer,
        "n_tokens": result.n_tokens,
        "rag_finish": result.retrieval.finish,
        "max_abs_log_ratio": result.max_abs_log_ratio,
        "max_abs_log_ratio_vocab": result.max_abs_log_ratio_vocab,
        "scores": scores,
    }
    if features:
        record["features"] = features
    if errors:
        record["errors"] = errors
    if "noisy_repcs" in result.extras:
        noisy = result.extras["noisy_repcs"]
        record["noisy_z"] = {"sigma": list(noisy["sigma"]), "z": list(noisy["z"])}
    for k, v in (meta.get("extra") or {}).items():
        record[f"extra.{k}"] = v
    return record


def _meta(row: Row) -> dict[str, Any]:
    if isinstance(row, LabeledRow):
        return {"row": row.row, "label": row.label, "extra": row.extra}
    return {
        "row": row.row,
        "answer_context": row.answer_context,
        "answer_memory": row.answer_memory,
        "extra": row.extra,
    }


def score_records(
    handle: ModelHandle,
    rows: Sequence[Row],
    request: ScoreRequest | DualPathSettings,
    detectors: dict[str, Detector],
    *,
    swap_test: bool = False,
    **options: Any,
) -> list[dict[str, Any]]:
    """Score one batch of rows (one :func:`core.engine.batch.score_batch` call) and return their records.

    ``request`` is a :class:`~core.engine.batch.ScoreRequest`, or the settings of one built from ``options``
    (``threshold``, ``threshold_source``, ``noise_sigmas``, ``noise_seed``, ``free_parametric``). Conflict rows
    also get ``follows`` (which source the retrieval answer repeats) and, with ``free_parametric``,
    ``parametric_follows``. With ``swap_test``, each row also gets ``swap_test`` (:mod:`core.engine.swap`, at the
    headline's answer span; the batch's swapped contexts are answered in one padded generation), and where context
    and memory agree a decided test carries its ``verdict`` (:func:`core.engine.swap_verdict.carry`);
    ``internals_verdict`` is always the internals' own prediction.

    When a detector reads the retrieval trace or CRM's displacement (:func:`core.detectors.shared.reads_the_run`),
    the batch is run with ``record=True``: each row's trace comes from the batch's own generation (left-padded
    like it, so its values round like the batch's Z, in the last bits), its h^0 from the batch's scoring pass,
    and each row's recording is dropped once the row is scored.
    """
    if not rows:
        return []
    request = ScoreRequest.of(request, **options)
    if reads_the_run(detectors):  # the batch's generation keeps the retrieval trace and CRM's h^0 of each row
        request = replace(request, record=True)
    settings = request.settings
    results = score_batch(handle, [(r.query, r.context) for r in rows], request)
    swaps = run_swap_tests(handle, results, [headline_span(res) for res in results]) if swap_test else None
    records = []
    for i, (r, res) in enumerate(zip(rows, results)):
        rec = record_for(handle, res, settings, detectors, _meta(r))
        res.internals = None  # this row is scored: its recording goes
        if swaps is not None:  # a decided test carries the headline where context and memory agree
            carried = carry(res.head, swaps[i])
            rec["verdict"], rec["axes"], rec["swap_test"] = carried.verdict, carried.to_dict(), swaps[i].to_dict()
        if isinstance(r, ConflictRow):
            rec["follows"] = answer_follows(res.retrieval.answer, r.answer_context, r.answer_memory)
            if request.free_parametric:
                rec["parametric_follows"] = answer_follows(res.parametric.answer, r.answer_context, r.answer_memory)
        records.append(rec)
    return records
