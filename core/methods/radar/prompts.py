"""RADAR's prompts: the text analyzed for a query, and the bundled labeled prompt sets (``assets/radar``).

The training set (30 prompts: 15 recall, 15 reasoning) and the test set (100 prompts in four categories)
follow the paper's design (§3, Table 1) but are this project's own; ``assets/radar/README.md`` describes them.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from core.io import asset_path

RADAR_DIR = asset_path("radar")
TRAIN_PATH = RADAR_DIR / "train.csv"
TEST_PATH = RADAR_DIR / "test.csv"

RECALL = "recall"
REASONING = "reasoning"
LABELS = (RECALL, REASONING)
TRAIN = "train"
TEST = "test"
TRAIN_CATEGORIES = (RECALL, REASONING)
TEST_CATEGORIES = ("clear_recall", "clear_reasoning", "ambiguous", "complex_reasoning")
CATEGORY_TITLES = {
    RECALL: "Recall",
    REASONING: "Reasoning",
    "clear_recall": "Clear recall",
    "clear_reasoning": "Clear reasoning",
    "ambiguous": "Challenging / ambiguous",
    "complex_reasoning": "Complex reasoning",
}


def radar_prompt(query: str, context: str | None = None) -> str:
    """The text RADAR analyzes for a query: the query alone (default: the model's own recall vs reasoning),
    or the context, a blank line and the query."""
    query = (query or "").strip()
    if context is not None and context.strip():
        return f"{context.strip()}\n\n{query}"
    return query


@dataclass(frozen=True)
class RadarPrompt:
    """One labeled prompt of the bundled sets.

    Attributes:
        id: unique within its split (e.g. ``tr-rec-01``).
        prompt: the text, fed raw (no chat template).
        category: one of :data:`TRAIN_CATEGORIES` or :data:`TEST_CATEGORIES`.
        label: :data:`RECALL` or :data:`REASONING`.
        split: :data:`TRAIN` or :data:`TEST`.
    """

    id: str
    prompt: str
    category: str
    label: str
    split: str


def _read_set(path: Path, split: str, categories: Sequence[str]) -> list[RadarPrompt]:
    rows = list(csv.DictReader(io.StringIO(Path(path).read_text(encoding="utf-8"))))
    out = []
    for number, row in enumerate(rows, start=1):
        missing = [k for k in ("id", "prompt", "category", "label") if not (row.get(k) or "").strip()]
        if missing:
            raise ValueError(f"{path}: row {number} lacks {', '.join(missing)}")
        if row["label"] not in LABELS:
            raise ValueError(f"{path}: row {number} has label {row['label']!r}, not one of {', '.join(LABELS)}")
        if row["category"] not in categories:
            raise ValueError(
                f"{path}: row {number} has category {row['category']!r}, not one of {', '.join(categories)}"
            )
        out.append(RadarPrompt(row["id"].strip(), row["prompt"].strip(), row["category"], row["label"], split))
    ids = [p.id for p in out]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path}: duplicate ids")
    return out


def load_prompt_sets(train_path: Path = TRAIN_PATH, test_path: Path = TEST_PATH) -> list[RadarPrompt]:
    """The bundled training (30) and test (100) prompts, training first.

    Raises:
        ValueError: a row without id/prompt/category/label, an unknown label or category, or duplicate ids.
    """
    return _read_set(train_path, TRAIN, TRAIN_CATEGORIES) + _read_set(test_path, TEST, TEST_CATEGORIES)


def prompts_signature(prompts: Sequence[RadarPrompt]) -> str:
    """A short hash of the prompt sets (ids, text, categories, labels): cached features must match it."""
    payload = json.dumps([[p.split, p.id, p.prompt, p.category, p.label] for p in prompts], ensure_ascii=False)
    return hashlib.sha1(payload.encode("utf-8")).hexdigest()[:16]
