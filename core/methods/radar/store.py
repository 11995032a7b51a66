"""RADAR feature tables: the 37 features of the bundled prompts for one model, cached as CSV + JSON.

Features are extracted once per model for the bundled training and test sets and cached: the embedded
model's ship in ``assets/radar/features/embedded.csv``; any model's go to ``core.io.cache_dir()/radar``,
named by :attr:`core.model.handle.ModelHandle.slug`. A cached table is used only while its metadata (model,
layers, heads, :data:`~core.methods.radar.features.FEATURE_VERSION`, prompt-set hash, feature names) matches.
The classifier is rebuilt from these tables when needed (no pickles).
"""

from __future__ import annotations

import csv
import io
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from core.io import EMBEDDED_SLUG, atomic_write_json, atomic_write_text
from core.methods.radar.features import FEATURE_NAMES, FEATURE_VERSION, feature_vector
from core.methods.radar.prompts import RADAR_DIR, RECALL, RadarPrompt, load_prompt_sets, prompts_signature
from core.methods.radar.trace import extract_features
from core.model import artifacts
from core.model.handle import ModelHandle
from core.model.progress import Progress

logger = logging.getLogger(__name__)

EMBEDDED_FEATURES_PATH = RADAR_DIR / "features" / f"{EMBEDDED_SLUG}.csv"
"""The embedded model's features, shipped with the app (its metadata is the ``.json`` next to it)."""


@dataclass
class FeatureTable:
    """Features of the bundled prompts for one model.

    Attributes:
        prompts: the prompts, row by row.
        X: shape ``(n, 37)``, float64, columns in :data:`~core.methods.radar.features.FEATURE_NAMES` order.
        meta: model name/source, layers, heads, dtype, device, ``feature_version``, ``prompts_signature``.
    """

    prompts: list[RadarPrompt]
    X: np.ndarray
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.X = np.asarray(self.X, dtype=np.float64)
        if self.X.shape != (len(self.prompts), len(FEATURE_NAMES)):
            raise ValueError(
                f"feature matrix has shape {self.X.shape}, expected ({len(self.prompts)}, {len(FEATURE_NAMES)})"
            )

    def split(self, split: str) -> tuple[list[RadarPrompt], np.ndarray]:
        """The prompts and the ``(n_split, 37)`` feature rows of one split (``"train"`` or ``"test"``)."""
        rows = [i for i, p in enumerate(self.prompts) if p.split == split]
        return [self.prompts[i] for i in rows], self.X[rows]

    def labels(self, split: str) -> np.ndarray:
        """1 = recall, 0 = reasoning (the paper's y) for the rows of ``split``."""
        return np.array([1 if p.label == RECALL else 0 for p in self.prompts if p.split == split], dtype=np.int64)

    def to_csv(self) -> str:
        """``split, id, category, label`` and the 37 features per row; floats as ``repr`` (lossless)."""
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(["split", "id", "category", "label", *FEATURE_NAMES])
        for p, row in zip(self.prompts, self.X, strict=True):
            writer.writerow([p.split, p.id, p.category, p.label, *(repr(float(v)) for v in row)])
        return buf.getvalue()


def feature_cache_path(handle: ModelHandle) -> Path:
    """Where this model's features are cached on disk (CSV; its metadata sits next to it as JSON)."""
    return artifacts.cache_path(RADAR_FEATURES, handle)


def _meta_path(csv_path: Path) -> Path:
    return csv_path.with_suffix(".json")


def expected_meta(handle: ModelHandle, prompts: Sequence[RadarPrompt]) -> dict[str, Any]:
    """The metadata a current feature table of this model and these prompts carries."""
    info = handle.info
    return {
        "model": info.name,
        "source": info.source,
        "n_layers": info.n_layers,
        "n_heads": info.n_heads,
        "dtype": info.dtype,
        "device": info.device,
        "feature_version": FEATURE_VERSION,
        "prompts_signature": prompts_signature(prompts),
        "feature_names": list(FEATURE_NAMES),
        "prompt_format": "raw text, tokenizer special tokens, no chat template",
    }


def save_feature_table(table: FeatureTable, path: Path) -> None:
    """Write the table as CSV and its metadata as JSON next to it (both atomically)."""
    path = Path(path)
    atomic_write_text(path, table.to_csv())
    atomic_write_json(_meta_path(path), table.meta)


def read_feature_table(path: Path, prompts: Sequence[RadarPrompt]) -> FeatureTable:
    """Read a feature CSV (+ JSON metadata) and align it with ``prompts`` by (split, id).

    Raises:
        ValueError: unreadable file, different feature columns, or rows that do not match the prompts.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        meta = json.loads(_meta_path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"Cannot read RADAR features from {path}: {exc}") from exc
    reader = csv.reader(io.StringIO(text))
    header = next(reader, [])
    if header[4:] != list(FEATURE_NAMES):
        raise ValueError(f"{path}: the feature columns differ from the 37 features of this version")
    rows = {(r[0], r[1]): np.array([float(v) for v in r[4:]], dtype=np.float64) for r in reader if r}
    missing = [p.id for p in prompts if (p.split, p.id) not in rows]
    if missing or len(rows) != len(prompts):
        raise ValueError(f"{path}: rows do not match the bundled prompt sets ({len(missing)} missing)")
    X = np.stack([rows[(p.split, p.id)] for p in prompts])
    return FeatureTable(list(prompts), X, meta)


def _meta_matches(meta: dict[str, Any], expected: dict[str, Any]) -> bool:
    keys = ("model", "n_layers", "n_heads", "feature_version", "prompts_signature", "feature_names")
    return all(meta.get(k) == expected.get(k) for k in keys)


def _stale(table: FeatureTable, handle: ModelHandle, _variant: str) -> str | None:
    if _meta_matches(table.meta, expected_meta(handle, table.prompts)):
        return None
    return "stale (model, version or prompt sets changed)"


RADAR_FEATURES = artifacts.ArtifactKind(
    name="radar-features",
    read=lambda path: read_feature_table(path, load_prompt_sets()),
    bundled=lambda slug, variant: EMBEDDED_FEATURES_PATH,
    cache=lambda slug, variant: Path("radar") / f"{slug}.csv",
    fresh=_stale,
    memo=False,
)
"""RADAR's feature table of the bundled prompts: shipped for the embedded model, else extracted and cached."""


def cached_feature_table(handle: ModelHandle, prompts: Sequence[RadarPrompt] | None = None) -> FeatureTable | None:
    """This model's features of the bundled sets if they are on disk and current, else ``None``.

    The embedded model's ship in ``assets/radar/features``; any model's are looked up in the user cache
    (:data:`RADAR_FEATURES`, :func:`core.model.artifacts.find`).
    """
    rows = list(prompts) if prompts is not None else load_prompt_sets()
    return artifacts.find(RADAR_FEATURES, handle, read_with=lambda path: read_feature_table(path, rows))


def extract_feature_table(
    handle: ModelHandle, prompts: Sequence[RadarPrompt] | None = None, progress: Progress | None = None
) -> FeatureTable:
    """Extract the 37 features of every prompt (one forward pass each; ``progress(done, total)``)."""
    prompts = list(prompts) if prompts is not None else load_prompt_sets()
    rows = []
    for i, p in enumerate(prompts):
        features, _ = extract_features(handle, p.prompt)
        rows.append(feature_vector(features))
        if progress is not None:
            progress(i + 1, len(prompts))
    return FeatureTable(list(prompts), np.stack(rows), expected_meta(handle, prompts))


def feature_table_for(
    handle: ModelHandle, *, compute: bool = True, progress: Progress | None = None, path: Path | None = None
) -> FeatureTable | None:
    """The model's features of the bundled sets: from disk when current, else extracted and cached.

    Args:
        compute: extract (130 forward passes) when nothing is cached; ``False`` returns ``None`` instead.
        progress: ``progress(done, total)`` during extraction.
        path: where to cache (default :func:`feature_cache_path`).
    """
    prompts = load_prompt_sets()
    table = cached_feature_table(handle, prompts)
    if table is not None or not compute:
        return table
    logger.info("Extracting RADAR features of %d prompts for %s", len(prompts), handle.info.name)
    table = extract_feature_table(handle, prompts, progress)
    save_feature_table(table, path or feature_cache_path(handle))
    return table
