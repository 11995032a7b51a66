"""The agreement view's result objects: one detector's verdict, a costly detector not run yet, the whole view.

:func:`core.detectors.agreement.assess` builds them; pages draw them and ``run --json --all-detectors`` writes
:meth:`Agreement.to_dict` and :meth:`Agreement.groups`. No model call and no scoring here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from core.detectors.registry import GROUPS
from core.detectors.registry import DetectorThreshold as DetectorThreshold
from core.detectors.wording import (
    GROUP_WORDS,
    HEADLINE_GROUPS,
    against_headline,
    direction,
    finding,
    group_of,
    group_summary,
    measures,
    says,
    summary_line,
)
from core.engine.estimate import describe_estimate

GROUP_ORDER = {group: i for i, group in enumerate(GROUPS)}
GROUPS_FIRST = next(iter(GROUPS))


@dataclass
class DetectorVerdict:
    """One detector's reading of one example.

    Attributes:
        name, label: the registry's name and label; ``higher_means``: ``"memorized"`` or ``"grounded"``.
        score: the raw score (``None`` when the detector could not run on this example, see ``error``).
        threshold, source: the threshold and where it came from.
        verdict: a value of :data:`core.engine.verdict.VERDICTS`.
        cost: the registry's cost; ``error``: why there is no score; ``note``: what the verdict means here.
        group: the question it answers (a key of :data:`~core.detectors.registry.GROUPS`; by default the
            registry's group of ``name``, else context reliance).
    """

    name: str
    label: str
    higher_means: str
    score: float | None
    threshold: float | None
    source: str
    verdict: str
    cost: str
    error: str | None = None
    note: str | None = None
    group: str | None = None

    def __post_init__(self) -> None:
        if self.group is None:
            from core.detectors.registry import get

            detector = get(self.name)
            self.group = detector.group if detector is not None else None
        self.group = group_of(self.group)

    @property
    def says(self) -> str:
        """What the verdict says, in the group's own words (a table cell)."""
        return says(self.group, self.verdict)

    @property
    def finding(self) -> str:
        """The verdict as its group's token (``"read"``, ``"familiar"``, ``"recall-type"``, …)."""
        return finding(self.group, self.verdict)

    @property
    def direction(self) -> str:
        """``"higher = …"`` in the group's words."""
        return direction(self.group, self.higher_means)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (``score``/``threshold`` ``None`` → ``null``), with ``group``, ``direction``, ``finding``
        and ``says`` (``verdict`` keeps the shared values: the side of the threshold)."""
        return asdict(self) | {"direction": self.direction, "finding": self.finding, "says": self.says}


@dataclass(frozen=True)
class CostlyDetector:
    """A detector that needs extra generations: listed with an estimate, run on request."""

    name: str
    label: str
    cost: str
    estimate_s: float | None
    group: str = GROUPS_FIRST

    @property
    def estimate(self) -> str:
        """``"≈ 2 min on this machine"`` (or that no cost is measured yet)."""
        return describe_estimate(self.estimate_s)


@dataclass
class Agreement:
    """Every cheap detector's verdict on one example, the costly ones not yet run, the headline's axes by the group
    they belong to (:func:`headline_axes`; ``{}`` when none), and the summary line."""

    verdicts: list[DetectorVerdict]
    costly: list[CostlyDetector]
    axes: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def summary(self) -> str:
        """Each group's sentence (what its detectors measure, where they disagree with the headline), one after the
        other."""
        return summary_line(self.verdicts, self.axes)

    def group_summary(self, group: str) -> str:
        """One group's sentence: what its detectors measure and where they disagree with the headline's axis, and
        why (:func:`~core.detectors.wording.group_summary`)."""
        return group_summary(group, self.verdicts, self.axes.get(group))

    def against_headline(self, verdict: DetectorVerdict) -> str | None:
        """``"agrees"`` / ``"disagrees"``: the row against the headline's axis its group feeds, else ``None``."""
        return against_headline(verdict, self.axes.get(verdict.group or ""))

    def ordered(self) -> list[DetectorVerdict]:
        """The verdicts group by group, in :data:`~core.detectors.registry.GROUPS` order (stable within one)."""
        return sorted(self.verdicts, key=lambda v: GROUP_ORDER[group_of(v.group)])

    def by_group(self) -> list[tuple[str, list[DetectorVerdict], list[CostlyDetector]]]:
        """``(group, verdicts, costly not run yet)`` for every group with a detector, in GROUPS order."""
        done = {v.name for v in self.verdicts}
        out = []
        for group in GROUPS:
            rows = [v for v in self.ordered() if v.group == group]
            pending = [c for c in self.costly if c.group == group and c.name not in done]
            if rows or pending or group in self.axes:
                out.append((group, rows, pending))
        return out

    def groups(self) -> list[dict[str, Any]]:
        """The ``detector_groups`` of ``run --json --all-detectors``: per group, in order, its question, whether
        it feeds the headline, its own summary sentence, what each of its detectors measures, those that disagree
        with the headline's axis, the detectors scored and those not run."""
        return [
            {
                "group": group,
                "title": GROUP_WORDS[group].title,
                "question": GROUPS[group],
                "feeds_headline": group in HEADLINE_GROUPS,
                "summary": self.group_summary(group),
                "measures": {v.name: measures(v.name) for v in rows},
                "disagree_with_headline": [v.name for v in rows if self.against_headline(v) == "disagrees"],
                "detectors": [v.name for v in rows],
                "not_run": [c.name for c in pending],
                "cannot_conclude": GROUP_WORDS[group].cannot,
                **({"headline_axis": self.axes[group]} if group in self.axes else {}),
            }
            for group, rows, pending in self.by_group()
        ]

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """``{name: {score, threshold, verdict, source, group, direction, …}}`` group by group (the ``detectors``
        key of ``run --json --all-detectors``)."""
        return {v.name: {k: x for k, x in v.to_dict().items() if k != "name"} for v in self.ordered()}
