"""Behavior as ground truth: which source an answer names, the row's behavior label, and detector AUCs against it.

A knowledge-conflict row has the object its context states (``answer_context``) and the object the model
remembers (``answer_memory``); each may list aliases separated by ``" | "``. The model's answer with the context
is labeled by what it names (:func:`behavior_label`):

* the context's object and not the remembered one → **read** (class ``grounded`` of a labeled CSV);
* the remembered object and not the context's → **recalled** (class ``memorized``);
* neither or both → no label (left out and counted, with the reason).

Matching (:func:`find_spans`, from :mod:`core.engine.matching`, where the engine's answer span and swap test use it
too) is on normalized words: Unicode NFKC, case-folded, accents and punctuation removed, the articles *a*, *an*,
*the* dropped, the number words zero–twenty written as digits and thousands separators removed; an alias matches
where its words occur as consecutive whole words of the answer ("Rome" is not found in "Romeo"). A match inside a
longer match of the other side does not count ("York" inside "New York").

:func:`behavior_report` computes every detector's ROC-AUC with its bootstrap CI (the metrics of
:func:`core.evaluation.report.detector_metrics`, positive class *recalled* = memorized) against the labels of a
run's own retrieval answers, on the conflict rows alone (both classes share one context construction) and on the
whole set, templated and real prose separately, and how often the run's headline verdict matches the behavior.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from core.detectors import Detector
from core.engine.matching import (
    ALIAS_SEPARATOR as ALIAS_SEPARATOR,
)
from core.engine.matching import (
    BOTH as BOTH,
)
from core.engine.matching import (
    NEITHER as NEITHER,
)
from core.engine.matching import (
    READ,
    RECALLED,
    behavior_label,
)
from core.engine.matching import (
    answer_sources as answer_sources,
)
from core.engine.matching import (
    find_spans as find_spans,
)
from core.engine.matching import (
    join_aliases as join_aliases,
)
from core.engine.matching import (
    normalize_words as normalize_words,
)
from core.engine.matching import (
    split_aliases as split_aliases,
)
from core.evaluation.data import SEED
from core.evaluation.report import N_BOOT, detector_metrics

BEHAVIORS = (READ, RECALLED)

KIND_COUNTERFACTUAL = "counterfactual"
"""A known fact's context with its object replaced by another object of the same relation (templated)."""
KIND_ON_TOPIC = "on_topic"
"""A known fact's subject in a context that lacks the object (templated; only *recalled* is possible)."""
KIND_NQ_SWAP = "nq_swap"
"""A Natural Questions passage with the answer entity substituted (real prose)."""
KIND_PROJECT_CONFLICT = "project_conflict"
"""A row of the project's hand-written conflict set (templated)."""
KIND_INVENTED = "invented"
"""An invented fact that only the context gives (templated; only *read* is possible)."""
CONFLICT_KINDS = (KIND_COUNTERFACTUAL, KIND_NQ_SWAP, KIND_PROJECT_CONFLICT)
PROSE_KINDS = (KIND_NQ_SWAP,)
KINDS = (KIND_COUNTERFACTUAL, KIND_ON_TOPIC, KIND_NQ_SWAP, KIND_PROJECT_CONFLICT, KIND_INVENTED)

SUBSETS: tuple[tuple[str, str], ...] = (
    ("conflict", "conflict rows (one context construction for both classes)"),
    ("conflict_templated", "conflict rows, templated contexts"),
    ("conflict_prose", "conflict rows, real prose (NQ-Swap)"),
    ("all", "the whole set"),
    ("templated", "the whole set, templated contexts"),
    ("prose", "the whole set, real prose (NQ-Swap)"),
)
"""The subsets :func:`behavior_report` reports, ``(key, description)``."""


def _field(record: Mapping[str, Any], name: str) -> Any:
    """A record's column: top level (conflict-set records) or ``extra.<name>`` (labeled CSVs)."""
    value = record.get(name)
    return record.get(f"extra.{name}") if value is None else value


def has_behavior_columns(records: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the records carry ``answer_context`` / ``answer_memory`` (a behavior-labeled or conflict set)."""
    return any(_field(r, "answer_context") is not None or _field(r, "answer_memory") is not None for r in records)


def record_behavior(record: Mapping[str, Any]) -> tuple[str | None, str]:
    """:func:`behavior_label` of a scored record's retrieval answer (``rag_answer``)."""
    return behavior_label(
        str(record.get("rag_answer") or ""), _field(record, "answer_context"), _field(record, "answer_memory")
    )


def record_kind(record: Mapping[str, Any]) -> str:
    """The row's ``kind``; a record of the conflict-set CSV (no ``kind`` column) is a project conflict row."""
    kind = _field(record, "kind")
    return str(kind) if kind else KIND_PROJECT_CONFLICT


def in_subset(kind: str, subset: str) -> bool:
    """Whether a row of ``kind`` belongs to one of :data:`SUBSETS`."""
    conflict = kind in CONFLICT_KINDS
    prose = kind in PROSE_KINDS
    return {
        "conflict": conflict,
        "conflict_templated": conflict and not prose,
        "conflict_prose": conflict and prose,
        "all": True,
        "templated": not prose,
        "prose": prose,
    }[subset]


def verdict_agreement(verdicts: Sequence[str | None], behaviors: Sequence[str]) -> dict[str, Any]:
    """How often a verdict (``read`` / ``recalled`` / ``inconclusive`` …) matches the behavior, on decisive rows.

    Returns:
        ``{"n", "match", "inconclusive", "wrong", "match_rate", "inconclusive_rate", "per_behavior": {behavior:
        {"n", "match", "inconclusive", "match_rate"}}}``; rates are ``None`` for no rows.
    """

    def counts(pairs: list[tuple[str | None, str]]) -> dict[str, Any]:
        n = len(pairs)
        match = sum(v == b for v, b in pairs)
        inconclusive = sum(v not in BEHAVIORS for v, _ in pairs)
        return {
            "n": n,
            "match": match,
            "inconclusive": inconclusive,
            "wrong": n - match - inconclusive,
            "match_rate": match / n if n else None,
            "inconclusive_rate": inconclusive / n if n else None,
        }

    pairs = list(zip(verdicts, behaviors, strict=True))
    out = counts(pairs)
    out["per_behavior"] = {b: counts([p for p in pairs if p[1] == b]) for b in BEHAVIORS}
    return out


def behavior_report(
    records: Sequence[Mapping[str, Any]],
    detectors: Mapping[str, Detector],
    *,
    n_boot: int = N_BOOT,
    seed: int = SEED,
) -> dict[str, Any] | None:
    """Every detector's AUC against behavior labels, per subset, and the headline verdict's agreement.

    Each record's label comes from its own retrieval answer (:func:`record_behavior`); rows without one are left
    out and counted by reason. Scores are the records' ``scores`` (for fitted detectors, the out-of-fold values
    :func:`core.evaluation.report.summarize` wrote). Subsets whose decisive rows miss a class get AUC ``None``.

    Returns:
        ``None`` when no record has ``answer_context`` / ``answer_memory``; else ``{"positive_class":
        "recalled", "label_source", "left_out": {reason: n}, "changed": n, "subsets": {key: {"description", "n",
        "n_read", "n_recalled", "detectors": {name: metrics}, "verdict": agreement, "text_only", "axis1",
        "text_wrong"}}, "swap_agreeing"}``; ``verdict`` is the headline's agreement, ``text_only`` / ``axis1`` the
        baselines' (:mod:`core.evaluation.validity`), ``text_wrong`` the headline on the rows where the text-only
        rule is wrong or undecided, ``swap_agreeing`` the headline against the swap test on rows whose context
        agrees with memory (``None`` without swap tests); ``changed`` counts rows whose stored ``behavior`` differs
        from this run's.
    """
    if not has_behavior_columns(records):
        return None
    labeled: list[tuple[Mapping[str, Any], str]] = []
    left_out: dict[str, int] = {}
    changed = 0
    for r in records:
        label, reason = record_behavior(r)
        if label is None:
            left_out[reason] = left_out.get(reason, 0) + 1
            continue
        stored = _field(r, "behavior")
        if stored and stored != label:
            changed += 1
        labeled.append((r, label))
    subsets: dict[str, Any] = {}
    for key, description in SUBSETS:
        rows = [(r, b) for r, b in labeled if in_subset(record_kind(r), key)]
        if not rows:
            continue
        y = np.array([1 if b == RECALLED else 0 for _, b in rows], dtype=int)
        subsets[key] = {
            "description": description,
            "n": len(rows),
            "n_read": int((y == 0).sum()),
            "n_recalled": int((y == 1).sum()),
            "detectors": {
                name: _compact(
                    detector_metrics(y, [r.get("scores", {}).get(name) for r, _ in rows], det, n_boot=n_boot, seed=seed)
                )
                for name, det in detectors.items()
            },
            "verdict": verdict_agreement([r.get("verdict") for r, _ in rows], [b for _, b in rows]),
            **_baselines(rows),
        }
    return {
        "positive_class": RECALLED,
        "label_source": "each row's own retrieval answer in this run (answer_context / answer_memory matched)",
        "left_out": left_out,
        "changed": changed,
        "subsets": subsets,
        "swap_agreeing": _swap_agreeing(records),
    }


def _baselines(rows: Sequence[tuple[Mapping[str, Any], str]]) -> dict[str, Any]:
    """The two baselines that read less than the headline (``text_only``, ``axis1``: records of this version) and
    the headline on the rows where the text-only rule is wrong or undecided (``text_wrong``)."""
    if not rows or "text_only" not in rows[0][0]:
        return {}
    hard = [(r, b) for r, b in rows if r.get("text_only") != b]
    return {
        "text_only": verdict_agreement([r.get("text_only") for r, _ in rows], [b for _, b in rows]),
        "axis1": verdict_agreement([r.get("axis1") for r, _ in rows], [b for _, b in rows]),
        "text_wrong": verdict_agreement([r.get("verdict") for r, _ in hard], [b for _, b in hard]),
    }


def _swap_agreeing(records: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The internals' own prediction against the swap test on rows the text cannot label (the answer names both: the
    context agrees with memory) where the swap test decided — not the headline, which the same test carries there
    (:mod:`core.engine.swap_verdict`); ``None`` when no row has one."""
    pairs = []
    for r in records:
        test = r.get("swap_test") or {}
        if test.get("outcome") in BEHAVIORS and record_behavior(r)[1] == BOTH:
            pairs.append((r.get("internals_verdict", r.get("verdict")), test["outcome"]))
    if not pairs:
        return None
    return verdict_agreement([v for v, _ in pairs], [b for _, b in pairs])


def _compact(entry: dict[str, Any]) -> dict[str, Any]:
    """A metrics entry without its ROC points (the behavior section stays small)."""
    return {k: v for k, v in entry.items() if k != "roc"}


def behavior_table(report: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """One flat row per (subset, detector) of a :func:`behavior_report`, for tables and CSVs."""
    rows: list[dict[str, Any]] = []
    for key, sub in ((report or {}).get("subsets") or {}).items():
        for name, m in sub["detectors"].items():
            ci = m.get("auc_ci") or [None, None]
            rows.append(
                {
                    "subset": key,
                    "detector": name,
                    "AUC": m.get("auc"),
                    "AUC 95% CI low": ci[0],
                    "AUC 95% CI high": ci[1],
                    "rows": m.get("n"),
                    "read": sub["n_read"],
                    "recalled": sub["n_recalled"],
                    "note": m.get("note", ""),
                }
            )
    return rows


def select_split(rows: Sequence[Any], split: str, source: str = "the data") -> list[Any]:
    """The rows whose ``split`` column (a labeled row's ``extra``) equals ``split``.

    Raises:
        ValueError: the rows have no ``split`` column, or none has that value (the message lists the values).
    """
    values = [getattr(r, "extra", {}).get("split") for r in rows]
    present = sorted({v for v in values if v})
    if not present:
        raise ValueError(f"--split {split}: {source} has no 'split' column.")
    kept = [r for r, v in zip(rows, values) if v == split]
    if not kept:
        raise ValueError(f"--split {split}: no row of {source} has it (its splits: {', '.join(present)}).")
    return kept


def behavior_lines(report: Mapping[str, Any] | None) -> list[str]:
    """A :func:`behavior_report` as plain lines: per subset, the class counts, the headline verdict's agreement
    and each detector's AUC with its CI (printed by ``python -m core evaluate``)."""
    if not report:
        return []
    left = ", ".join(f"{k} {v}" for k, v in sorted(report["left_out"].items())) or "none"
    lines = [f"against behavior (positive class recalled; rows left out: {left}):"]
    for key, sub in report["subsets"].items():
        v = sub["verdict"]
        rate = "n/a" if v["match_rate"] is None else f"{v['match_rate']:.0%}"
        inc = "n/a" if v["inconclusive_rate"] is None else f"{v['inconclusive_rate']:.0%}"
        lines.append(
            f"  {key}: {sub['n_read']} read, {sub['n_recalled']} recalled; headline verdict matches {rate}, "
            f"inconclusive {inc}"
        )
        for name, m in sub["detectors"].items():
            if m.get("auc") is None:
                lines.append(f"    {name:16s} AUC=n/a ({m.get('note', '')})")
            else:
                lo, hi = m["auc_ci"]
                lines.append(f"    {name:16s} AUC={m['auc']:.3f} [{lo:.3f}, {hi:.3f}]  n={m['n']}")
    return lines
