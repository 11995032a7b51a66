"""The rows a calibration scores: the bundled behavior rows (or a CSV in their columns, or a user's own unlabeled
(query, context) rows) grouped into units — the
rows written from one source record, which share a split and are kept or dropped together — in a seeded order in
which any prefix is a balanced sample (:func:`order_units`)."""

from __future__ import annotations

import csv
import io
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from core.evaluation.constructions import CALIBRATION, REPORT, TEMPLATED, ValidationRow, traffic_rows
from core.io import asset_path, read_user_file

ROWS_CSV = asset_path("validation", "rows.csv")
"""The bundled behavior rows (built by ``scripts/validate_headline.py build`` from facts and passages written by
others; the calibration never reads anything outside ``assets/``)."""
SEED = 0
MAX_ROWS_BYTES = 64 << 20
"""The largest rows file read (64 MB)."""


@dataclass
class Unit:
    """The rows written from one source record (a ROME fact, an NQ-Swap question, a project row): they share a
    split, and a fact's rows are kept or dropped together by the model's knowledge of it.

    Attributes:
        probe: the row whose query asks for the fact without context (knownness), ``None`` when none is needed.
    """

    key: str
    split: str
    rows: list[ValidationRow]
    probe: ValidationRow | None = None

    @property
    def stratum(self) -> str:
        return f"{self.split}/{self.rows[0].construction}/{self.rows[0].source}"


def read_rows(path: str | Path = ROWS_CSV) -> list[ValidationRow]:
    """The rows of a CSV: validation rows in :class:`ValidationRow`'s columns, or a user's own retrieval traffic —
    a ``query`` and a ``context`` column, no labels — as :func:`~core.evaluation.constructions.traffic_rows` (each
    row labeled by its swap test, split by question).

    Raises:
        ValueError: a file that is neither (the message names the missing columns), or traffic without a row.
    """
    raw = read_user_file(path, MAX_ROWS_BYTES, "rows file")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    with io.StringIO(text, newline="") as fh:
        reader = csv.DictReader(fh)
        columns = set(reader.fieldnames or [])
        missing = {"construction", "relation", "query", "context", "split"} - columns
        if not missing:
            return [ValidationRow.from_dict(r) for r in reader]
        if {"query", "context"} <= columns:
            rows = traffic_rows([(r.get("query") or "", r.get("context") or "") for r in reader], SEED)
            if not rows:
                raise ValueError(f"{path}: no row with both a query and a context")
            return rows
        raise ValueError(
            f"{path}: neither validation rows (missing {', '.join(sorted(missing))}) nor your own rows (a 'query' "
            "and a 'context' column)"
        )


def units_of(rows: Sequence[ValidationRow]) -> list[Unit]:
    """The rows grouped by source record; a ROME unit's probe is its templated row (the relation's question)."""
    by_key: dict[tuple[str, str, str], list[ValidationRow]] = {}
    for r in rows:
        if r.split not in (CALIBRATION, REPORT):
            continue
        by_key.setdefault((r.split, r.source, r.source_id or r.query), []).append(r)
    units = []
    for (split, source, ident), members in by_key.items():
        probe = None
        if source == "rome":
            probe = next((r for r in members if r.construction == TEMPLATED), members[0])
        units.append(Unit(f"{split}:{source}:{ident}", split, members, probe))
    return units


def _interleave(groups: dict[str, list[Unit]]) -> list[Unit]:
    """The units of every group merged so each group appears at an even pace (unit k of a group of n at
    (k + ½) / n)."""
    keyed = [((k + 0.5) / len(units), name, k, u) for name, units in groups.items() for k, u in enumerate(units)]
    return [u for *_, u in sorted(keyed, key=lambda t: t[:3])]


def order_units(units: Sequence[Unit], seed: int = SEED) -> list[Unit]:
    """A seeded order in which any prefix is balanced: within each split the strata (construction, source)
    interleave at their share, and the two splits alternate unit by unit."""
    per_split: dict[str, list[Unit]] = {}
    for split in (CALIBRATION, REPORT):
        strata: dict[str, list[Unit]] = {}
        for u in sorted((u for u in units if u.split == split), key=lambda u: u.key):
            strata.setdefault(u.stratum, []).append(u)
        for name, members in strata.items():
            random.Random(f"{seed}:{name}").shuffle(members)
        per_split[split] = _interleave(strata)
    return _interleave(per_split)
