"""RADAR on the bundled test set: per-category accuracy next to the paper's Table 1, and a length control.

Trained on a model's own features of the 30 training prompts, tested on the 100 test prompts. The paper's
numbers (:data:`PAPER_RESULTS`) are for DialoGPT-medium on its own sets: a reference, not a like-for-like
comparison. :func:`length_baseline` is a control the paper does not report. :func:`evaluation_for` is what the
RADAR page shows: the embedded model's report ships in ``assets/radar/ensemble/``, any other model's is computed
once and kept in the user cache.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from core.io import EMBEDDED_SLUG, atomic_write_json
from core.methods.radar.classifier import (
    ENSEMBLE_DIR,
    RadarClassifier,
    RadarPrediction,
    cross_validated_accuracy,
    table_digest,
)
from core.methods.radar.prompts import (
    CATEGORY_TITLES,
    LABELS,
    REASONING,
    RECALL,
    TEST,
    TEST_CATEGORIES,
    TRAIN,
    RadarPrompt,
)
from core.methods.radar.store import FeatureTable
from core.methods.radar.trace import encode_radar_prompt
from core.model import artifacts
from core.model.handle import ModelHandle

logger = logging.getLogger(__name__)

PAPER_RESULTS: dict[str, float] = {
    "clear_recall": 1.0,
    "clear_reasoning": 1.0,
    "ambiguous": 23 / 30,
    "complex_reasoning": 1.0,
    "overall": 0.93,
    "recall_tasks": 0.977,
    "reasoning_tasks": 0.893,
    "train_cv": 0.967,
    "rds_recall": 0.933,
    "rds_reasoning": 0.375,
}
"""RADAR Table 1, §3.1 (training cross-validation) and §3.2 (mean RDS) on DialoGPT-medium."""


def prompt_token_counts(handle: ModelHandle, prompts: Sequence[RadarPrompt]) -> list[int]:
    """The number of tokens of each prompt as RADAR reads it (tokenization only, no model call)."""
    return [len(encode_radar_prompt(handle, p.prompt)) for p in prompts]


def _length_model(table: FeatureTable, counts: np.ndarray, random_state: int) -> tuple[Any, np.ndarray]:
    """The length control's logistic regression on log(prompt length), fitted on the table's training rows, and
    the training-row mask."""
    from sklearn.linear_model import LogisticRegression

    is_train = np.array([p.split == TRAIN for p in table.prompts])
    model = LogisticRegression(random_state=random_state).fit(np.log(counts)[is_train, None], table.labels(TRAIN))
    return model, is_train


def length_baseline(table: FeatureTable, token_counts: Sequence[int], random_state: int = 0) -> np.ndarray:
    """A control the paper does not report: logistic regression on log(prompt length) alone, trained on the
    same training rows; returns its 0/1 (1 = recall) predictions for the test rows.

    Several RADAR features grow with the prompt length by construction (the attention entropy sums over all
    query positions), so this shows how much of the accuracy the length alone explains.
    """
    counts = np.asarray(token_counts, dtype=np.float64)
    if counts.shape != (len(table.prompts),) or (counts < 1).any():
        raise ValueError(f"need one positive token count per prompt ({len(table.prompts)}), got shape {counts.shape}")
    model, is_train = _length_model(table, counts, random_state)
    return model.predict(np.log(counts)[~is_train, None]).astype(np.int64)


def length_control_probability(
    table: FeatureTable, token_counts: Sequence[int], n_tokens: int, random_state: int = 0
) -> float:
    """P(recall) that the :func:`length_baseline` control gives a prompt of ``n_tokens`` tokens: the logistic
    regression on log(prompt length) fitted on the table's training rows (shown next to RADAR's own label).

    Raises:
        ValueError: a token count that is not positive, or one count per prompt missing.
    """
    counts = np.asarray(token_counts, dtype=np.float64)
    if counts.shape != (len(table.prompts),) or (counts < 1).any() or n_tokens < 1:
        raise ValueError("need one positive token count per prompt and a positive n_tokens")
    model, _ = _length_model(table, counts, random_state)
    return float(model.predict_proba(np.log([[float(n_tokens)]]))[0, list(model.classes_).index(1)])


def _test_rows(
    prompts: Sequence[RadarPrompt],
    preds: Sequence[RadarPrediction],
    counts: Sequence[int | None],
    baseline: np.ndarray | None,
) -> list[dict[str, Any]]:
    """One report row per test prompt: its prediction, whether it is right, and the length control's verdict."""
    return [
        {
            "id": p.id,
            "prompt": p.prompt,
            "category": p.category,
            "label": p.label,
            "predicted": pr.label,
            "correct": pr.label == p.label,
            "soft_correct": pr.soft_label == p.label,
            "p_recall": pr.p_recall,
            "rds": pr.rds,
            "rci": pr.rci,
            "n_tokens": counts[i],
            "length_correct": None if baseline is None else bool((baseline[i] == 1) == (p.label == RECALL)),
        }
        for i, (p, pr) in enumerate(zip(prompts, preds, strict=True))
    ]


def _summary(selected: list[dict[str, Any]], with_length: bool, paper: float | None = None) -> dict[str, Any]:
    """Counts and accuracies (hard label, soft label, length control) of some report rows, with the paper's."""
    n = len(selected)
    correct = sum(r["correct"] for r in selected)
    summary = {
        "n": n,
        "correct": int(correct),
        "accuracy": correct / n if n else None,
        "soft_accuracy": sum(r["soft_correct"] for r in selected) / n if n else None,
        "length_accuracy": (sum(r["length_correct"] for r in selected) / n if n and with_length else None),
    }
    return summary if paper is None else {**summary, "paper": paper}


def evaluate_table(
    table: FeatureTable, random_state: int = 0, cv: bool = True, token_counts: Sequence[int] | None = None
) -> dict[str, Any]:
    """Train on the table's training rows, evaluate on its test rows, per category, next to the paper.

    Args:
        token_counts: the prompts' lengths in tokens, row by row; when given, the report adds the accuracy of
            :func:`length_baseline` (``length_accuracy``) everywhere.

    Returns:
        ``{"categories": [{category, title, n, correct, accuracy, soft_accuracy, length_accuracy, paper}],
        "overall", "recall_tasks", "reasoning_tasks", "train_cv", "rds_mean", "rows": [...]}`` — accuracies
        use the paper's hard-majority label; ``soft_accuracy`` uses p̄ > 1/2.
    """
    clf = RadarClassifier.from_table(table, random_state)
    prompts, X = table.split(TEST)
    if not prompts:
        raise ValueError("The feature table has no test rows.")
    preds = clf.predict(X)
    with_length = token_counts is not None
    baseline = length_baseline(table, token_counts, random_state) if token_counts is not None else None
    test_counts = (
        [int(n) for n, p in zip(token_counts, table.prompts, strict=True) if p.split == TEST]
        if token_counts is not None
        else [None] * len(prompts)
    )
    rows = _test_rows(prompts, preds, test_counts, baseline)
    by_label = {lab: [r for r in rows if r["label"] == lab] for lab in LABELS}
    rds_mean = {lab: float(np.mean([r["rds"] for r in sel])) if sel else None for lab, sel in by_label.items()}
    _, X_train = table.split(TRAIN)
    train_cv = cross_validated_accuracy(X_train, table.labels(TRAIN), random_state=random_state) if cv else None
    return {
        "model": table.meta.get("model"),
        "categories": [
            {"category": cat, "title": CATEGORY_TITLES[cat], **_summary(sel, with_length), "paper": PAPER_RESULTS[cat]}
            for cat, sel in ((c, [r for r in rows if r["category"] == c]) for c in TEST_CATEGORIES)
        ],
        "overall": _summary(rows, with_length, PAPER_RESULTS["overall"]),
        "recall_tasks": _summary(by_label[RECALL], with_length, PAPER_RESULTS["recall_tasks"]),
        "reasoning_tasks": _summary(by_label[REASONING], with_length, PAPER_RESULTS["reasoning_tasks"]),
        "train_cv": {"accuracy": train_cv, "paper": PAPER_RESULTS["train_cv"]},
        "rds_mean": {
            "recall": rds_mean[RECALL],
            "reasoning": rds_mean[REASONING],
            "paper_recall": PAPER_RESULTS["rds_recall"],
            "paper_reasoning": PAPER_RESULTS["rds_reasoning"],
        },
        "rows": rows,
    }


EMBEDDED_REPORT_PATH = ENSEMBLE_DIR / f"{EMBEDDED_SLUG}.json"
"""The embedded model's test-set report (with every prompt's token count), written by
``scripts/build_radar_assets.py`` next to its ensemble."""
_REPORTS: dict[tuple[str, str], dict[str, Any]] = {}


def _read_report(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or "report" not in data:
        raise ValueError("not a RADAR report (no 'report' object)")
    return data


RADAR_REPORT = artifacts.ArtifactKind(
    name="radar-report",
    read=_read_report,
    bundled=lambda slug, digest: EMBEDDED_REPORT_PATH,
    cache=lambda slug, digest: Path("radar") / f"report-{digest}.json",
    fresh=lambda data, handle, digest: None if data.get("digest") == digest else "computed from other features",
)
"""The test-set report of a feature table, keyed by the table's digest (:func:`table_digest`): the embedded model's
bundled one, else the user cache's (:func:`core.model.artifacts.find_by_content`)."""


def cached_report_path(digest: str) -> Path:
    """Where the report of features of this digest is kept in the user cache."""
    return artifacts.content_cache_path(RADAR_REPORT, digest)


def stored_report(path: Path, digest: str) -> dict[str, Any] | None:
    """The report stored at ``path`` if it was computed from features of ``digest``, else ``None``."""
    try:
        data = _read_report(path)
    except (OSError, ValueError) as exc:
        logger.warning("RADAR report %s not used: %s", path, exc)
        return None
    return data["report"] if data.get("digest") == digest else None


def report_document(table: FeatureTable, report: dict[str, Any]) -> dict[str, Any]:
    """What a stored report file holds: the digest and model of the features, then the report."""
    return {"digest": table_digest(table), "model": table.meta.get("model"), "report": report}


def evaluation_for(handle: ModelHandle, table: FeatureTable, *, store: bool = True) -> dict[str, Any]:
    """:func:`evaluate_table` of a model's table with its token counts (``report["token_counts"]``, every
    prompt in table order, for the length control): in memory, else stored (bundled for the embedded model's
    features, else the user cache), else computed once and (with ``store``) written to the user cache."""
    digest = table_digest(table)
    key = (str(table.meta.get("model")), digest)
    if (report := _REPORTS.get(key)) is not None:
        return report
    if (stored := artifacts.find_by_content(RADAR_REPORT, digest)) is not None:
        return _REPORTS.setdefault(key, stored["report"])
    counts = prompt_token_counts(handle, table.prompts)
    report = {**evaluate_table(table, token_counts=counts), "token_counts": counts}
    report = _REPORTS.setdefault(key, report)
    if store:
        try:
            atomic_write_json(cached_report_path(digest), report_document(table, report))
        except OSError as exc:
            logger.warning("RADAR report not cached: %s", exc)
    return report
