"""Every verdict for one example: each cheap detector's score, its threshold, where that came from, its verdict.

The agreement view of the Dual Path page and ``python -m core run --json --all-detectors`` both call
:func:`assess`. It takes the detectors from the registry (:func:`core.detectors.registry.available`), so a
detector registered later (the combined detector, say) appears without a change here:

* **cheap** — cost ``"free"`` or ``"forward"`` (no extra generation) and a single-row score (detectors that are
  only fitted by cross-validation during an evaluation have none): scored now, with a threshold and a verdict;
* **costly** — cost ``"generate"`` or ``"heavy"`` (Self-Critique, SMA, CRM L1): listed with a time estimate
  (:mod:`core.engine.estimate`) and scored only on request (:func:`judge`).

Where a detector's threshold comes from is part of its declaration (``Detector.thresholds``: the run's τ in force
for RePCS, a classifier's own calibrated τ, the bundled per-detector calibration of the model — RePCS Algorithm 1
applied to each detector —, a fitted probability's decision boundary …; the rules are in
:mod:`core.detectors.thresholds`), and so is how its score becomes a verdict (``Detector.reading``: the side of
the threshold by default). Nothing here is keyed by a detector's name: every row is read through its declaration.

**Groups.** Every detector names the question it answers (``Detector.group``, one of
:data:`core.detectors.registry.GROUPS`): context reliance, parametric knowledge, familiarity of the context
text, recall vs reasoning of the query (RADAR), source attribution (SMA). Rows are listed group by group, in
that order; each row says what its verdict means in its group's own words (:mod:`core.detectors.wording`:
``says``, ``finding``, ``direction``) and the summary counts within a group only — groups are never counted
against each other. Only context reliance and parametric knowledge feed the headline verdict
(:data:`HEADLINE_GROUPS`).

A detector that ``follows_run`` (RePCS) keeps its row the run's own verdict under the one τ in force
(:func:`with_result` reads it again when the τ changes after the scores were computed). RADAR reads the query alone
and answers another question — does the query look like a recall or a reasoning task? — so its reading gives its
own label (``recall-type`` / ``reasoning-type``), never read/recalled.

What this can and cannot conclude: detectors measure different things (how far the context moved the
answer's distributions, how familiar the context text is to the model, what the query alone looks like); a
disagreement is information about the example, not an error, and agreement is not proof of memorization.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from core.detectors.registry import CHEAP_COSTS as CHEAP_COSTS
from core.detectors.registry import (
    CONTEXT_RELIANCE,
    PARAMETRIC_KNOWLEDGE,
    Detector,
    DetectorInput,
    available,
    get,
)
from core.detectors.shared import plan, release
from core.detectors.thresholds import DEFAULT_ALPHA as DEFAULT_ALPHA
from core.detectors.thresholds import DETECTOR_THRESHOLDS as DETECTOR_THRESHOLDS
from core.detectors.thresholds import THRESHOLD_DIR as THRESHOLD_DIR
from core.detectors.thresholds import alpha_threshold as alpha_threshold
from core.detectors.thresholds import bundled_path as bundled_path
from core.detectors.thresholds import bundled_thresholds as bundled_thresholds
from core.detectors.thresholds import detector_threshold as detector_threshold
from core.detectors.thresholds import read_verdict
from core.detectors.thresholds import verdict_for as verdict_for
from core.detectors.verdicts import GROUP_ORDER as GROUP_ORDER
from core.detectors.verdicts import GROUPS_FIRST as GROUPS_FIRST
from core.detectors.verdicts import Agreement as Agreement
from core.detectors.verdicts import CostlyDetector as CostlyDetector
from core.detectors.verdicts import DetectorThreshold as DetectorThreshold
from core.detectors.verdicts import DetectorVerdict as DetectorVerdict
from core.detectors.wording import HEADLINE_GROUPS as HEADLINE_GROUPS
from core.detectors.wording import OTHER_AXIS_DISPLAY as OTHER_AXIS_DISPLAY
from core.detectors.wording import REASONING_TYPE as REASONING_TYPE
from core.detectors.wording import RECALL_TYPE as RECALL_TYPE
from core.detectors.wording import group_of
from core.detectors.wording import group_summary as group_summary
from core.detectors.wording import short_name as short_name
from core.detectors.wording import summary_line as summary_line
from core.detectors.wording import summary_lines as summary_lines
from core.detectors.wording import verdict_words as verdict_words
from core.engine import DualPathResult, DualPathSettings
from core.engine import axes as axes_module
from core.engine.estimate import estimate_seconds, observe_result
from core.model.handle import ModelHandle
from core.model.progress import Progress

logger = logging.getLogger(__name__)

COSTLY_COSTS = ("generate", "heavy")


# ----------------------------------------------------------------------------------------------------------
# Which detectors


def _grouped(detectors: Iterable[Detector]) -> list[Detector]:
    return sorted(detectors, key=lambda d: GROUP_ORDER[group_of(d.group)])


def is_single_row(detector: Detector) -> bool:
    """Whether the detector scores one row on its own (cross-validated detectors only score an evaluation)."""
    return detector.single_row


def cheap_detectors() -> list[Detector]:
    """Registered detectors that need no extra generation and score a single row, group by group."""
    return _grouped(d for d in available().values() if d.is_cheap and d.single_row)


def costly_detectors() -> list[Detector]:
    """Registered single-row detectors that need extra generations, group by group."""
    return _grouped(d for d in available().values() if not d.is_cheap and d.single_row)


# ----------------------------------------------------------------------------------------------------------
# Scoring


def judge(detector: Detector, inp: DetectorInput) -> DetectorVerdict:
    """Score ``detector`` on the example and read its verdict through its declaration (its threshold rules, its
    reading); a failure becomes ``error`` (never raised)."""
    threshold = detector_threshold(detector, inp)
    score: float | None = None
    error = None
    try:
        error = detector.ready(inp) if detector.ready is not None else None
        if error is None:
            value = float(detector.score(inp))
            if math.isfinite(value):
                score = value
            else:
                error = "the score is not a finite number"
    except Exception as exc:  # noqa: BLE001 - one detector failing must not lose the others
        logger.info("detector %s unavailable: %s", detector.name, exc)
        error = str(exc) or type(exc).__name__
    verdict, threshold = read_verdict(detector, inp, score, threshold)
    return DetectorVerdict(
        name=detector.name,
        label=detector.label,
        higher_means=detector.higher_means,
        score=score,
        threshold=threshold.value,
        source=threshold.source,
        verdict=verdict,
        cost=detector.cost,
        error=error,
        note=detector.note,
        group=detector.group,
    )


def reread(row: DetectorVerdict, inp: DetectorInput) -> DetectorVerdict:
    """A row of a detector that ``follows_run`` read again from ``inp.result`` (its threshold and verdict; the score
    is kept); any other row as it is."""
    detector = get(row.name)
    if detector is None or not detector.follows_run:
        return row
    verdict, threshold = read_verdict(detector, inp, row.score, detector_threshold(detector, inp))
    return replace(row, threshold=threshold.value, source=threshold.source, verdict=verdict)


AXIS_OF_GROUP = {CONTEXT_RELIANCE: axes_module.RELIANCE, PARAMETRIC_KNOWLEDGE: axes_module.SUPPORT}
"""The headline's axis that each of the two headline groups feeds (:mod:`core.engine.axes`)."""


def headline_axes(result: DualPathResult) -> dict[str, dict[str, Any]]:
    """The headline's two axes of ``result`` (its stored ``axes``, else :func:`core.engine.axes.headline`: no model
    call), keyed by the group each belongs to: context reliance → axis 1, parametric knowledge → axis 2 (the
    parametric support). ``{}`` when they cannot be computed."""
    found = result.axes
    if found is None:
        try:
            found = result.headline  # decided once per result (result.head)
        except Exception as exc:  # noqa: BLE001 - the detectors are still shown without the axes
            logger.info("headline axes unavailable: %s", exc)
            return {}
    return {group: found[key] for group, key in AXIS_OF_GROUP.items() if isinstance(found.get(key), dict)}


def with_result(agreement: Agreement, inp: DetectorInput, result: DualPathResult) -> Agreement:
    """The agreement of a run whose verdict was re-decided under another τ (:func:`core.engine.scoring.rejudge`):
    every score is kept, the rows of detectors that follow the run (RePCS) follow ``result`` (so the table, the
    summary and the headline show one τ),
    and ``inp`` now holds ``result`` for the detectors run later."""
    inp.result = result
    return Agreement([reread(v, inp) for v in agreement.verdicts], agreement.costly, agreement.axes)


def estimate_cost(handle: ModelHandle, detector: Detector, settings: DualPathSettings) -> float | None:
    """Seconds a costly detector will take on this handle: its declared estimate (``Detector.estimate``, through
    :mod:`core.engine.estimate`), else one generation of ``max_new_tokens``."""
    if detector.estimate is not None:
        return detector.estimate(handle, settings)
    return estimate_seconds(handle, generated_tokens=int(settings.max_new_tokens), forwards=1)


def detector_input(
    handle: ModelHandle, result: DualPathResult, settings: DualPathSettings | None = None
) -> DetectorInput:
    """The :class:`DetectorInput` of a run (its own settings unless others are given)."""
    return DetectorInput(handle=handle, result=result, settings=settings or result.run_settings)


def assess(
    handle: ModelHandle,
    result: DualPathResult,
    *,
    names: Iterable[str] | None = None,
    inp: DetectorInput | None = None,
    on_detector: Progress | None = None,
) -> Agreement:
    """Score every cheap detector on one run and list the costly ones with their estimates.

    Args:
        handle: the model the result came from.
        result: the run.
        names: only these cheap detectors (default: every one, :func:`cheap_detectors`).
        inp: a :class:`DetectorInput` to reuse (its cache shares work with later calls, e.g. :func:`judge`). The
            detectors share one traced forward of the retrieval path (:mod:`core.detectors.shared`), dropped
            from the cache when every detector has run.
        on_detector: ``on_detector(done, total, name)`` before each detector (a progress bar).
    """
    inp = inp or detector_input(handle, result)
    detectors = cheap_detectors()
    if names is not None:
        wanted = set(names)
        detectors = [d for d in detectors if d.name in wanted]
    if estimate_seconds(handle, generated_tokens=1) is None:
        observe_result(handle, result)  # a result from before this process: its own timings seed the meter
    plan(inp, detectors)
    verdicts = []
    for i, detector in enumerate(detectors):
        if on_detector is not None:
            on_detector(i, len(detectors), detector.name)
        verdicts.append(judge(detector, inp))
    release(inp)  # the shared retrieval pass: its products stay in inp.cache, its residual stream goes
    costly = [
        CostlyDetector(d.name, d.label, d.cost, estimate_cost(handle, d, inp.settings), d.group)
        for d in costly_detectors()
    ]
    return Agreement(verdicts=verdicts, costly=costly, axes=headline_axes(result))
