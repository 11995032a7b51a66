"""The labeled calibration prompt set of CRM level 3 (reading, validation, digest).

The bundled set (``assets/crm/calibration_prompts.json``, 60 + 60) replaces WikiMIA: memorized-style = famous
encyclopedic facts, grounded = invented entities; labels by construction, a membership proxy as in the paper
(appendix A) with a known topic confound.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from core.engine.verdict import GROUNDED, MEMORIZED
from core.io import asset_path

CALIBRATION_PROMPTS = asset_path("crm", "calibration_prompts.json")


@dataclass(frozen=True)
class CalibrationPrompt:
    """One labeled calibration prompt (``label`` is ``"memorized"`` or ``"grounded"``)."""

    id: str
    label: str
    query: str
    context: str


def load_calibration_prompts(path: str | Path = CALIBRATION_PROMPTS) -> list[CalibrationPrompt]:
    """Read and validate a calibration prompt set (JSON with a ``prompts`` list).

    Raises:
        ValueError: a malformed file, an unknown label, an empty field, a duplicate id, or a single class.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"Cannot read the calibration prompts {path}: {exc}") from exc
    rows = data.get("prompts") if isinstance(data, dict) else None
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"{path}: expected an object with a non-empty 'prompts' list")
    out: list[CalibrationPrompt] = []
    seen: set[str] = set()
    for i, row in enumerate(rows):
        try:
            prompt = CalibrationPrompt(str(row["id"]), str(row["label"]), str(row["query"]), str(row["context"]))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{path}: prompt {i} lacks id/label/query/context") from exc
        if prompt.label not in (MEMORIZED, GROUNDED):
            raise ValueError(
                f"{path}: prompt {prompt.id} has label {prompt.label!r}; use {MEMORIZED!r} or {GROUNDED!r}"
            )
        if not prompt.query.strip() or not prompt.context.strip():
            raise ValueError(f"{path}: prompt {prompt.id} has an empty query or context")
        if prompt.id in seen:
            raise ValueError(f"{path}: duplicate prompt id {prompt.id}")
        seen.add(prompt.id)
        out.append(prompt)
    if len({p.label for p in out}) < 2:
        raise ValueError(f"{path}: both classes ({MEMORIZED}, {GROUNDED}) are needed")
    return out


def prompt_set_digest(prompts: Sequence[CalibrationPrompt]) -> str:
    """SHA-256 of the prompts' ids, labels and texts (ties a basis to the exact set it was computed from)."""
    payload = json.dumps([[p.id, p.label, p.query, p.context] for p in prompts], ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()
