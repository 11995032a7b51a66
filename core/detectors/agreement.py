"""Every verdict for one example: each cheap detector's score, its threshold, where that came from, its verdict.

The agreement view of the Dual Path page and ``python -m core run --json --all-detectors`` both call
:func:`assess`. It takes the detectors from the registry (:func:`core.detectors.registry.available`), so a
detector registered later (the combined detector, say) appears without a change here:

* **cheap** — cost ``"free"`` or ``"forward"`` (no extra generation) and a single-row score (detectors that are
  only fitted by cross-validation during an evaluation have none): scored now, with a threshold and a verdict;
* **costly** — cost ``"generate"`` or ``"heavy"`` (Self-Critique, SMA, CRM L1): listed with a time estimate
  (:mod:`core.engine.estimate`) and scored only on request (:func:`judge`).

Where a detector's threshold comes from (:func:`detector_threshold`), first match wins:

1. ``repcs``: the τ in force for the run (the result's ``threshold`` and ``threshold_source``: a τ chosen
   in this session, the bundled calibration, or its labeled fallback);
2. a ``threshold(inp) -> (value, source) | None`` attribute of the detector, for detectors that carry their own
   calibrated τ;
3. the bundled per-detector calibration of the model (``assets/thresholds/detectors-<slug>.json``, written by
   ``scripts/calibrate_detectors.py``): RePCS Algorithm 1 applied to each detector — the α-quantile of its
   score over the clean (context-dependent) calibration prompts, on the memorized side — with the
   achieved FPR/FNR on those sets;
4. probability detectors with a fitted decision rule (``crm_lr``, ``radar``): p = 0.5;
5. otherwise none: the verdict is ``"uncalibrated"`` ("No threshold").

A verdict is ``"recalled"`` when the score lies on the memorized side of the threshold (below it for a
detector where higher means grounded, as RePCS' Z < τ; above it otherwise), else ``"read"``. The verdict
strings are those of :mod:`core.engine.verdict`.

**Groups.** Every detector names the question it answers (``Detector.group``, one of
:data:`core.detectors.registry.GROUPS`): context reliance, parametric knowledge, familiarity of the context
text, recall vs reasoning of the query (RADAR), source attribution (SMA). Rows are listed group by group, in
that order; each row says what its verdict means in its group's own words (:mod:`core.detectors.wording`:
``says``, ``finding``, ``direction``) and the summary counts within a group only — groups are never counted
against each other. Only context reliance and parametric knowledge feed the headline verdict
(:data:`HEADLINE_GROUPS`).

RePCS' row is the run's own verdict under the one τ in force (:func:`with_result` keeps it so when the τ
changes after the scores were computed). RADAR reads the query alone and answers another question —
does the query look like a recall or a reasoning task? — so its row is never translated into read/recalled:
it carries RADAR's own label (:data:`RECALL_TYPE` / :data:`REASONING_TYPE`, the RADAR page's majority vote)
and stays out of the read/recalled counts of the summary.

What this can and cannot conclude: detectors measure different things (how far the context moved the
answer's distributions, how familiar the context text is to the model, what the query alone looks like); a
disagreement is information about the example, not an error, and agreement is not proof of memorization.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from core.detectors import keys as detector_keys
from core.detectors.registry import (
    CONTEXT_RELIANCE,
    GROUNDED_HIGH,
    MEMORIZED_HIGH,
    PARAMETRIC_KNOWLEDGE,
    Detector,
    DetectorInput,
    available,
)
from core.detectors.shared import plan, release
from core.detectors.verdicts import GROUP_ORDER as GROUP_ORDER
from core.detectors.verdicts import GROUPS_FIRST as GROUPS_FIRST
from core.detectors.verdicts import Agreement as Agreement
from core.detectors.verdicts import CostlyDetector as CostlyDetector
from core.detectors.verdicts import DetectorThreshold as DetectorThreshold
from core.detectors.verdicts import DetectorVerdict as DetectorVerdict
from core.detectors.wording import HEADLINE_GROUPS as HEADLINE_GROUPS
from core.detectors.wording import OTHER_AXIS_DISPLAY as OTHER_AXIS_DISPLAY
from core.detectors.wording import REASONING_TYPE, RECALL_TYPE, group_of
from core.detectors.wording import SHORT_NAMES as SHORT_NAMES
from core.detectors.wording import group_summary as group_summary
from core.detectors.wording import short_name as short_name
from core.detectors.wording import summary_line as summary_line
from core.detectors.wording import summary_lines as summary_lines
from core.detectors.wording import verdict_words as verdict_words
from core.engine import DualPathResult, DualPathSettings
from core.engine import axes as axes_module
from core.engine.estimate import estimate_seconds, observe_result
from core.engine.verdict import READ, RECALLED, UNCALIBRATED, normalize_verdict
from core.io import asset_path
from core.model import artifacts
from core.model.handle import ModelHandle
from core.model.progress import Progress

logger = logging.getLogger(__name__)

CHEAP_COSTS = ("free", "forward")
COSTLY_COSTS = ("generate", "heavy")

THRESHOLD_DIR = asset_path("thresholds")
DEFAULT_ALPHA = 0.05
"""α of every threshold this module calibrates (RePCS Algorithm 1's default)."""

PROBABILITY_RULES = {
    "crm_lr": "the logistic regression's decision boundary, P(memorized) = 0.5",
    "radar": "the ensemble's decision boundary, p̄(recall) = 0.5 (RADAR §2.3)",
}
"""Detectors whose score is a fitted probability: their own decision rule is the fallback threshold."""

RECALL_VS_REASONING = ("radar",)
"""Detectors on RADAR's recall-vs-reasoning axis: their label is shown in their own words, never as a verdict."""

NOTES = {
    "radar": "reads the query alone and says whether it looks like recall or reasoning — another question than "
    "whether this answer read the context",
    "ppl": "scores the context text, not the answer",
    "zlib": "scores the context text, not the answer",
}
"""One clause per detector whose verdict means something narrower than the others' (shown next to it)."""


# ----------------------------------------------------------------------------------------------------------
# Which detectors


def _grouped(detectors: Iterable[Detector]) -> list[Detector]:
    return sorted(detectors, key=lambda d: GROUP_ORDER[group_of(d.group)])


def is_single_row(detector: Detector) -> bool:
    """Whether the detector scores one row on its own (cross-validated detectors only score an evaluation)."""
    return not (detector.needs_fit and detector.features is not None)


def cheap_detectors() -> list[Detector]:
    """Registered detectors that need no extra generation and score a single row, group by group."""
    return _grouped(d for d in available().values() if d.cost in CHEAP_COSTS and is_single_row(d))


def costly_detectors() -> list[Detector]:
    """Registered single-row detectors that need extra generations, group by group."""
    return _grouped(d for d in available().values() if d.cost in COSTLY_COSTS and is_single_row(d))


# ----------------------------------------------------------------------------------------------------------
# Thresholds


def bundled_path(handle: ModelHandle) -> Path:
    """Where the bundled per-detector calibration of ``handle``'s model lives."""
    return THRESHOLD_DIR / f"detectors-{handle.slug}.json"


def _read_bundled(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("detectors"), dict):
        raise ValueError("not a per-detector calibration (no 'detectors' object)")
    return data


DETECTOR_THRESHOLDS = artifacts.ArtifactKind(
    name="detector-thresholds",
    read=_read_bundled,
    bundled=lambda slug, variant: THRESHOLD_DIR / f"detectors-{slug}.json",
    bundled_embedded_only=False,
    fresh=lambda data, handle, variant: None if data.get("model") == handle.info.name else "another model's",
)
"""The bundled per-detector calibration (``scripts/calibrate_detectors.py``), by the model's slug."""


def bundled_thresholds(handle: ModelHandle) -> dict[str, Any] | None:
    """The bundled per-detector calibration of the handle's model, or ``None`` (no file, or another model's)."""
    return artifacts.find(DETECTOR_THRESHOLDS, handle)


def _bundled_source(data: dict[str, Any], entry: dict[str, Any], settings: DualPathSettings) -> str:
    n_clean, n_mem = data.get("n_clean", "?"), data.get("n_memorized", "?")
    alpha = float(data.get("alpha", 0.05))
    parts = [f"bundled calibration: {alpha:.0%}-quantile over {n_clean} clean prompts"]
    fpr, fnr = entry.get("fpr"), entry.get("fnr")
    if fpr is not None and fnr is not None:
        parts.append(f"FPR {fpr:.0%} / FNR {fnr:.0%} on {n_clean} clean and {n_mem} memorized prompts")
    calibrated = data.get("settings") or {}
    window = calibrated.get("score_window")
    if window is not None and int(window) != int(settings.score_window):
        parts.append(f"calibrated at T = {window}, this run used T = {settings.score_window}")
    return " · ".join(parts)


def detector_threshold(detector: Detector, inp: DetectorInput) -> DetectorThreshold:
    """The threshold of ``detector`` for this example and where it came from (see the module's list)."""
    if detector.name == "repcs":
        source = inp.result.threshold_source or "no threshold available"
        return DetectorThreshold(inp.result.threshold, source)
    hook = getattr(detector, "threshold", None)
    if callable(hook):
        found = hook(inp)
        if found is not None:
            value, source = found
            return DetectorThreshold(None if value is None else float(value), str(source))
    data = bundled_thresholds(inp.handle)
    entry = (data or {}).get("detectors", {}).get(detector.name)
    if isinstance(entry, dict) and isinstance(entry.get("threshold"), (int, float)):
        return DetectorThreshold(float(entry["threshold"]), _bundled_source(data or {}, entry, inp.settings))
    if detector.name in PROBABILITY_RULES:
        return DetectorThreshold(0.5, PROBABILITY_RULES[detector.name])
    if detector.name == "crm_l2":
        found = _crm_l2_threshold(inp)
        if found is not None:
            return found
    return DetectorThreshold(None, "no threshold calibrated for this detector and model")


def alpha_threshold(clean_scores: Any, higher_means: str, alpha: float = DEFAULT_ALPHA) -> float:
    """RePCS Algorithm 1 for any detector: the α-quantile of the clean prompts' scores on the memorized side
    (the α-quantile when higher means grounded, the (1 − α)-quantile when higher means memorized), so about
    a share α of clean prompts is flagged.

    Raises:
        ValueError: no finite clean score, α outside (0, 1), or an unknown direction.
    """
    scores = np.asarray(clean_scores, dtype=np.float64).ravel()
    scores = scores[np.isfinite(scores)]
    if scores.size == 0:
        raise ValueError("need at least one finite clean score")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if higher_means not in (MEMORIZED_HIGH, GROUNDED_HIGH):
        raise ValueError(f"higher_means must be 'memorized' or 'grounded', got {higher_means!r}")
    return float(np.quantile(scores, alpha if higher_means == GROUNDED_HIGH else 1.0 - alpha))


def _crm_l2_threshold(inp: DetectorInput) -> DetectorThreshold | None:
    """The L2-norm baseline's threshold from the CRM basis' own calibration prompts (grounded ones)."""
    from core.detectors.crm import basis_for

    try:
        basis = basis_for(inp)
    except ValueError:
        return None
    per_prompt = np.asarray(basis.calib_l2, dtype=np.float64)[:, 1:].mean(axis=1)
    clean = per_prompt[np.asarray(basis.calib_labels) == 0]
    if clean.size == 0:
        return None
    value = alpha_threshold(clean, MEMORIZED_HIGH)
    return DetectorThreshold(
        value, f"CRM basis calibration: {DEFAULT_ALPHA:.0%}-quantile over its {clean.size} grounded prompts"
    )


def verdict_for(score: float | None, threshold: float | None, higher_means: str) -> str:
    """``"recalled"`` when ``score`` is on the memorized side of ``threshold``, ``"read"`` on the other side
    (a tie counts as read, as RePCS flags only Z < τ), ``"uncalibrated"`` without a score or threshold.

    Raises:
        ValueError: ``higher_means`` is neither ``"memorized"`` nor ``"grounded"``.
    """
    if higher_means not in (MEMORIZED_HIGH, GROUNDED_HIGH):
        raise ValueError(f"higher_means must be 'memorized' or 'grounded', got {higher_means!r}")
    if score is None or threshold is None or not (math.isfinite(score) and math.isfinite(threshold)):
        return UNCALIBRATED
    memorized_side = score > threshold if higher_means == MEMORIZED_HIGH else score < threshold
    return RECALLED if memorized_side else READ


# ----------------------------------------------------------------------------------------------------------
# Scoring


Prerequisite = Callable[[DetectorInput], str | None]


def _radar_ready(inp: DetectorInput) -> str | None:
    from core.methods.radar import feature_table_for

    if feature_table_for(inp.handle, compute=False) is None:
        return "RADAR's classifier is not built for this model yet: open the RADAR page once to build it"
    return None


PREREQUISITES: dict[str, Prerequisite] = {"radar": _radar_ready}
"""Checks that keep a cheap view cheap: a detector whose one-off setup is long is skipped with the reason."""


def judge(detector: Detector, inp: DetectorInput) -> DetectorVerdict:
    """Score ``detector`` on the example and read its verdict; a failure becomes ``error`` (never raised)."""
    threshold = detector_threshold(detector, inp)
    score: float | None = None
    error = None
    try:
        check = PREREQUISITES.get(detector.name)
        error = check(inp) if check is not None else None
        if error is None:
            value = float(detector.score(inp))
            if math.isfinite(value):
                score = value
            else:
                error = "the score is not a finite number"
    except Exception as exc:  # noqa: BLE001 - one detector failing must not lose the others
        logger.info("detector %s unavailable: %s", detector.name, exc)
        error = str(exc) or type(exc).__name__
    if detector.name in RECALL_VS_REASONING:
        verdict, threshold = _recall_or_reasoning(inp, score)
    else:
        verdict = verdict_for(score, threshold.value, detector.higher_means)
    found = DetectorVerdict(
        name=detector.name,
        label=detector.label,
        higher_means=detector.higher_means,
        score=score,
        threshold=threshold.value,
        source=threshold.source,
        verdict=verdict,
        cost=detector.cost,
        error=error,
        note=NOTES.get(detector.name),
        group=detector.group,
    )
    return _repcs_row(found, inp.result) if detector.name == "repcs" else found


def _recall_or_reasoning(inp: DetectorInput, score: float | None) -> tuple[str, DetectorThreshold]:
    """RADAR's own label for the query (the majority vote the RADAR page shows), never read/recalled."""
    details = inp.cache.get(detector_keys.RADAR_DETAILS) or {}
    label = ((details.get("prediction") or {}).get("label") or "").lower()
    rule = DetectorThreshold(None, "RADAR's own rule: a majority of its four classifiers (as on the RADAR page)")
    if score is None or label not in ("recall", "reasoning"):
        return UNCALIBRATED, rule
    return (RECALL_TYPE if label == "recall" else REASONING_TYPE), rule


def _repcs_row(row: DetectorVerdict, result: DualPathResult) -> DetectorVerdict:
    """RePCS' row as the run says it: the τ in force, where it came from, the engine's verdict (with its
    inconclusive band)."""
    verdict = normalize_verdict(result.verdict) if row.score is not None else UNCALIBRATED
    source = result.threshold_source or "no threshold available"
    return replace(row, threshold=result.threshold, source=source, verdict=verdict)


AXIS_OF_GROUP = {CONTEXT_RELIANCE: axes_module.RELIANCE, PARAMETRIC_KNOWLEDGE: axes_module.SUPPORT}
"""The headline's axis that each of the two headline groups feeds (:mod:`core.engine.axes`)."""


def headline_axes(result: DualPathResult) -> dict[str, dict[str, Any]]:
    """The headline's two axes of ``result`` (its stored ``axes``, else :func:`core.engine.axes.headline`: no model
    call), keyed by the group each belongs to: context reliance → axis 1, parametric knowledge → axis 2 (the
    parametric support). ``{}`` when they cannot be computed."""
    found = result.axes
    if found is None:
        try:
            found = axes_module.headline(result).to_dict()
        except Exception as exc:  # noqa: BLE001 - the detectors are still shown without the axes
            logger.info("headline axes unavailable: %s", exc)
            return {}
    return {group: found[key] for group, key in AXIS_OF_GROUP.items() if isinstance(found.get(key), dict)}


def with_result(agreement: Agreement, inp: DetectorInput, result: DualPathResult) -> Agreement:
    """The agreement of a run whose verdict was re-decided under another τ (:func:`core.engine.scoring.rejudge`):
    every score is kept, RePCS' row follows ``result`` (so the table, the summary and the headline show one τ),
    and ``inp`` now holds ``result`` for the detectors run later."""
    inp.result = result
    rows = [_repcs_row(v, result) if v.name == "repcs" else v for v in agreement.verdicts]
    return Agreement(rows, agreement.costly, agreement.axes)


def estimate_cost(handle: ModelHandle, detector: Detector, settings: DualPathSettings) -> float | None:
    """Seconds a costly detector will take on this handle, from the measured cost per generated token.

    Self-Critique decodes r₁ (``max_new_tokens``) then r₂ (twice as long); SMA generates its N = 64 perturbed
    prompts twice (context on and off) in batches of 8 of up to 32 tokens; CRM L1 decodes the parametric
    answer once. Other costly detectors count as one generation of ``max_new_tokens``.
    """
    n = int(settings.max_new_tokens)
    if detector.name == "selfcritique":
        return estimate_seconds(handle, generated_tokens=3 * n, forwards=2)
    if detector.name == "sma":
        batches = 2 * math.ceil(64 / 8)
        return estimate_seconds(handle, generated_tokens=batches * min(32, n), forwards=2, batch_factor=1.5)
    return estimate_seconds(handle, generated_tokens=n, forwards=1)


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
    plan(inp, [d.name for d in detectors])
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
