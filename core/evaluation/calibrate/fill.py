"""Which unit a calibration scores next: the seeded balanced order of :func:`.rows.order_units`, except that once
the calibration rows scored so far leave one behavior short, each calibration slot goes to the stratum (construction
and source) whose rows have most often shown that behavior — the budget is filled with rows of the behavior the fits
lack (:class:`Filler`).

Only the **calibration** slots move: the report units keep their seeded order, so the held-out rows stay a balanced
sample whatever the model does, and nothing about a report row is read to choose anything. A stratum's yield is
counted on the calibration rows labeled by their answer's text while the rows are scored (a row whose context agrees
with memory is labeled later, by its swap test, and is not counted here), smoothed by one row of each behavior so an
unseen stratum is tried. Units already scored (a resumed run) come first, in their seeded order, so a resumed run
picks up where it stopped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.engine.verdict import READ, RECALLED
from core.evaluation.calibrate.records import RowRecord
from core.evaluation.calibrate.rows import Unit
from core.evaluation.constructions import CALIBRATION
from core.evaluation.headline_fit import row_key

WARMUP_LABELS = 16
"""Text-labeled calibration rows needed before the fill starts (before that the seeded order alone)."""
SHORT_SHARE = 0.4
"""The fill runs while the fewer behavior is under this share of the labeled calibration rows."""


def _stratum(unit: Unit) -> str:
    return f"{unit.rows[0].construction}/{unit.rows[0].source}"


@dataclass
class Filler:
    """The next units to score, from the seeded order (``order``) and the rows scored so far (``records``: the
    calibration's own dict, updated by the caller as it scores).

    Attributes:
        moved: calibration units the fill took out of their seeded turn, per stratum, and the behavior they were for.
    """

    order: Sequence[Unit]
    records: Mapping[str, RowRecord]
    moved: dict[str, dict[str, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        scored = [u for u in self.order if self._scored(u)]
        rest = [u for u in self.order if not self._scored(u)]
        self._first = list(scored)
        self._slots = [u.split == CALIBRATION for u in rest]
        self._report = [u for u in rest if u.split != CALIBRATION]
        self._strata: dict[str, list[Unit]] = {}
        self._seeded = [u for u in rest if u.split == CALIBRATION]
        for u in self._seeded:
            self._strata.setdefault(_stratum(u), []).append(u)
        self._used: set[str] = set()

    def _scored(self, unit: Unit) -> bool:
        return bool(unit.rows) and all(row_key(r) in self.records for r in unit.rows)

    def counts(self) -> dict[str, dict[str, int]]:
        """Per calibration stratum, its text-labeled rows of each behavior so far."""
        out: dict[str, dict[str, int]] = {}
        for r in self.records.values():
            if r.row.split != CALIBRATION or r.swap is not None or r.label is None:
                continue
            entry = out.setdefault(f"{r.row.construction}/{r.row.source}", {READ: 0, RECALLED: 0})
            entry[r.label] += 1
        return out

    def short(self) -> str | None:
        """The behavior the labeled calibration rows lack (``None``: too few labeled yet, or neither is short)."""
        counts = self.counts()
        read = sum(c[READ] for c in counts.values())
        recalled = sum(c[RECALLED] for c in counts.values())
        if read + recalled < WARMUP_LABELS:
            return None
        fewer = RECALLED if recalled <= read else READ
        return fewer if min(read, recalled) < SHORT_SHARE * (read + recalled) else None

    def _calibration_unit(self) -> Unit | None:
        behavior = self.short()
        if behavior is not None:
            counts = self.counts()
            open_strata = [s for s, units in self._strata.items() if any(u.key not in self._used for u in units)]

            def yield_of(s: str) -> float:
                c = counts.get(s, {READ: 0, RECALLED: 0})
                return (c[behavior] + 1) / (c[READ] + c[RECALLED] + 2)

            if open_strata:
                best = max(open_strata, key=lambda s: (yield_of(s), -open_strata.index(s)))
                unit = next(u for u in self._strata[best] if u.key not in self._used)
                seeded_next = next((u for u in self._seeded if u.key not in self._used), None)
                if seeded_next is not None and seeded_next.key != unit.key:
                    entry = self.moved.setdefault(best, {})
                    entry[behavior] = entry.get(behavior, 0) + 1
                return self._take(unit)
        unit = next((u for u in self._seeded if u.key not in self._used), None)
        return None if unit is None else self._take(unit)

    def _next_report(self) -> Unit | None:
        return self._report.pop(0) if self._report else None

    def _take(self, unit: Unit) -> Unit:
        self._used.add(unit.key)
        return unit

    def next_units(self, n: int) -> list[Unit]:
        """The next ``n`` units (fewer at the end): the scored ones first, then each slot of the seeded order — a
        report slot its next report unit, a calibration slot :meth:`_calibration_unit`."""
        out: list[Unit] = []
        while len(out) < n and self._first:
            out.append(self._first.pop(0))
        while len(out) < n and self._slots:
            unit = self._calibration_unit() if self._slots.pop(0) else self._next_report()
            if unit is not None:
                out.append(unit)
        return out

    def to_dict(self) -> dict[str, Any]:
        """What the fill did, for the work state and the card."""
        return {"short": self.short(), "moved": self.moved, "labeled_by_stratum": self.counts()}
