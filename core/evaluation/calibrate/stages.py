"""The stages of a calibration, in one table (:data:`STAGES`) that drives the run (:func:`run_stages`).

Each :class:`Stage` names what it does, whether a resumed run skips it once done (the scoring stages: their rows
are in the work folder), the estimate of its time (for the whole job's time left) and the card's artifacts it
makes. The headline's artifacts — τ and τ(L), the axes — are fitted, written and put on a card as soon as the rows
and swap tests are in (``headline``): the verdict is usable from then on, while the card marks the detectors'
artifacts *pending* until ``detectors`` fits them (the Lookback Lens classifier, ReDeEP's choice, the combined
detector, the per-detector thresholds) and ``card`` writes the final card.

The CRM basis (18 minutes on Gemma 3 270M) comes after the headline's artifacts: rows scored before it exists keep
their CRM displacement, and ``crm-basis`` reads their CRM scores (and the combined detector's ``crm_lts``) from it
once the basis is computed — the same numbers as scoring them with the basis. ReDeEP's every-layer PKS (two thirds
of a row's scoring on Gemma's 262k-token vocabulary) is computed after it too (``redeep-pks``, one traced forward
per stored run). A time cap is spent on the headline first: the rows stop early enough for the swap tests and the
fits, and these two later stages take what the cap leaves — what it does not is *pending* on the card, finished by
running the same command again (whose time cap then counts for them from its own start: :attr:`Run.late_from`).
RADAR's assets (under a minute) still
come first: with them, a row's context statistics and RADAR's trace come from one shared forward, so the rows'
``ppl`` / ``min_k`` scores and their RADAR score need them at scoring time.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from core.engine import DualPathSettings
from core.engine.axes_calibration import bundled_axes
from core.evaluation.calibrate.budget import CRM_COST, FIT_RESERVE_S, PKS_COST, SWAP_COST, Budget
from core.evaluation.calibrate.checkpoints import Work
from core.evaluation.calibrate.fits import fit_detectors, fit_headline
from core.evaluation.calibrate.heldout import held_out
from core.evaluation.calibrate.progress import Tracker, duration
from core.evaluation.calibrate.records import Fitted, ModelIdentity, RowRecord
from core.evaluation.calibrate.rows import Unit
from core.evaluation.calibrate.save import DETECTOR_FITS, HEADLINE_FITS, describe, save_card, save_fitted
from core.evaluation.calibrate.score import read_crm_scores, read_pks, rows_stage, swap_stage
from core.evaluation.constructions import CALIBRATION, labeled_by_swap
from core.evaluation.model_card import build_card
from core.methods.crm import compute_basis, load_basis
from core.methods.crm.store import cache_basis_path
from core.methods.radar import classifier_from_table, evaluation_for, feature_cache_path, feature_table_for
from core.methods.redeep import ov_copying_scores
from core.model.handle import ModelHandle

logger = logging.getLogger(__name__)


@dataclass
class Run:
    """One calibration run: what every stage reads and what the stages hand on to each other."""

    handle: ModelHandle
    template: str
    folder: Path
    out: Path | None
    work: Work
    tracker: Tracker
    settings: DualPathSettings
    budget: Budget
    batch_size: int
    order: list[Unit]
    rows_file: Path
    elapsed: Callable[[], float]
    basis: Any = None
    notes: dict[str, str] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=lambda: {"scored": 0, "agreeing": 0, "swapped": 0})
    records: list[RowRecord] = field(default_factory=list)
    fitted: Fitted = field(default_factory=Fitted)
    paths: dict[str, str] = field(default_factory=dict)
    card: dict[str, Any] | None = None
    late_from: float = 0.0
    """The run's seconds when this invocation began, where the headline had been fitted before it (a second
    invocation that finishes the later stages: the time cap counts for them from here); else 0."""
    stamp: Callable[[], None] = lambda: None
    """Write the run's time so far (wall, CPU) and its peak memory into the work folder's state, for the card."""

    def crm_seconds(self) -> float:
        """The CRM basis' seconds still to come: none once it exists, else its prompts at the measured pace (or
        :data:`~core.evaluation.calibrate.budget.CRM_COST` rows each)."""
        if self.basis is not None or self.work.done("crm-basis"):
            return 0.0
        from core.methods.crm.prompts import load_calibration_prompts

        pace = self.tracker.pace.get("crm-basis") or CRM_COST * self.tracker.pace.get("rows", 0.0)
        return len(load_calibration_prompts()) * pace

    def over_deadline(self, needed_s: float) -> bool:
        cap = self.budget.time_cap
        return cap is not None and self.elapsed() + needed_s > cap * 60

    def over_late_deadline(self, needed_s: float) -> bool:
        """:meth:`over_deadline` for the detectors' later stages, whose time cap a second invocation renews."""
        cap = self.budget.time_cap
        return cap is not None and self.elapsed() - self.late_from + needed_s > cap * 60

    def count(self, records: dict[str, RowRecord]) -> None:
        """Keep :attr:`counts` (rows scored, agreeing, swap-tested) for the estimates."""
        rows = records.values()
        self.counts["scored"] = len(records)
        self.counts["agreeing"] = sum(labeled_by_swap(r.row) for r in rows)
        self.counts["swapped"] = sum(r.swap is not None for r in rows)

    def identity(self) -> ModelIdentity:
        info = self.handle.info
        trained = [{"path": shown(self.rows_file), "sha256": sha256(self.rows_file), "split": CALIBRATION}]
        return ModelIdentity(
            info.name, self.handle.slug, self.template, info.n_layers, info.n_heads, self.settings.to_dict(), trained
        )


def shown(path: Path) -> str:
    from core.io import REPO_ROOT

    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- the first stages: the CRM basis and RADAR's assets (kept when current) ----------------------------------------


def crm_stage(run: Run) -> float | None:
    t0 = time.monotonic()
    basis = load_basis(run.handle, run.template)
    note = "kept: a current CRM basis exists"
    if basis is None and run.over_late_deadline(run.crm_seconds()):
        return _pending(run, "crm-basis", f"its {duration(run.crm_seconds())} do not fit in the time cap")
    if basis is None:

        def on(done: int, total: int, _text: str = "") -> None:
            run.tracker.total = total
            run.tracker.measured("crm-basis", time.monotonic() - t0, done) if done == 1 else None
            run.tracker.report(done)

        run.tracker.begin("crm-basis", 0)
        basis = compute_basis(run.handle, progress=on, template=run.template)
        note = f"computed: {cache_basis_path(run.handle, run.template)}"
    run.basis = basis
    if read_crm_scores(run):  # the rows scored before the basis existed
        run.records = list(run.work.records().values())
    return _first_note(run, "crm-basis", note, t0)


def pks_stage(run: Run) -> float | None:
    """ReDeEP's every-layer PKS of the scored rows (for ReDeEP's choice), while the time cap leaves time."""
    t0 = time.monotonic()
    done, left = read_pks(run, run.over_late_deadline)
    run.records = list(run.work.records().values())
    if left:
        return _pending(run, "redeep-pks", f"PKS of {left} rows left: the time cap ended it ({done} computed now)")
    with_pks = sum(r.pks is not None for r in run.records)
    return _first_note(run, "redeep-pks", f"computed: every layer's PKS of {with_pks} rows", t0)


def _pending(run: Run, stage: str, why: str) -> None:
    """A later stage the time cap leaves for another invocation: noted on the card, not marked done."""
    run.notes[stage] = f"pending: {why}; run the same command again to finish it"
    run.work.state["notes"] = run.notes
    return None


def radar_stage(run: Run) -> float | None:
    t0 = time.monotonic()
    kept = feature_table_for(run.handle, compute=False) is not None

    def on(done: int, total: int, _text: str = "") -> None:
        run.tracker.total = total
        if done in (1, 8):
            run.tracker.measured("radar", time.monotonic() - t0, done)
        run.tracker.report(done)

    run.tracker.begin("radar", 0)
    table = feature_table_for(run.handle, compute=True, progress=on)
    if table is None:
        raise ValueError("RADAR's feature table could not be built")
    classifier_from_table(table)
    evaluation_for(run.handle, table)
    note = "kept: a current feature table exists" if kept else f"computed: {feature_cache_path(run.handle)}"
    return _first_note(run, "radar", note, t0)


def _first_note(run: Run, stage: str, note: str, t0: float) -> float | None:
    """The stage's note as its first run made it (``None``: done before, nothing to mark)."""
    if run.work.done(stage):
        run.notes.setdefault(stage, note)
    else:
        run.notes[stage] = note
    run.work.state["notes"] = run.notes
    return None if run.work.done(stage) else time.monotonic() - t0


# -- the fits and the card ---------------------------------------------------------------------------------------


def headline_stage(run: Run) -> float:
    """τ, τ(L) and the axes fitted and written, then a card with the detectors' artifacts pending."""
    t0 = time.monotonic()
    run.tracker.begin("headline", 1)
    run.records = list(run.work.records().values())
    run.fitted = fit_headline(run.records, run.identity())
    run.paths.update(save_fitted(run.handle, run.template, run.folder, run.fitted, HEADLINE_FITS))
    write_card(run, pending=fits_after("headline"))
    return _timed(run, "headline", t0)


def detectors_stage(run: Run) -> float:
    """The Lookback classifier, ReDeEP's choice, the combined detector and the per-detector thresholds."""
    t0 = time.monotonic()
    run.tracker.begin("detectors", 1)
    try:
        ov = ov_copying_scores(run.handle)
    except ValueError as exc:
        logger.info("no OV copying scores: %s", exc)
        ov = None
    fit_detectors(run.records, run.identity(), run.fitted, ov)
    run.paths.update(save_fitted(run.handle, run.template, run.folder, run.fitted, DETECTOR_FITS))
    return _timed(run, "detectors", t0)


def card_stage(run: Run) -> float:
    t0 = time.monotonic()
    run.tracker.begin("card", 1)
    write_card(run, pending=())
    return _timed(run, "card", t0)


def _timed(run: Run, stage: str, t0: float) -> float:
    seconds = time.monotonic() - t0
    run.tracker.measured(stage, seconds, 1)
    return seconds


def artifacts_of(run: Run, pending: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """The card's artifacts: the CRM basis and RADAR's assets (from their notes), then every fit."""
    out: dict[str, dict[str, Any]] = {}
    for stage, path in (
        ("crm-basis", cache_basis_path(run.handle, run.template)),
        ("radar", feature_cache_path(run.handle)),
        ("redeep-pks", None),
    ):
        note = run.notes.get(stage)
        if note is not None:
            status = note.split(":")[0]
            out[stage] = {"path": str(path) if path and status != "pending" else None, "status": status, "note": note}
        else:
            out[stage] = {"path": None, "status": "pending", "note": "a later stage of this run makes it"}
    return {**out, **describe(run.handle, run.fitted, run.paths, pending)}


def write_card(run: Run, pending: tuple[str, ...]) -> None:
    """Build the card of what is fitted so far (``pending``: the fits a later stage makes) and write it into the
    model's calibration folder and ``--out``."""
    bundled = bundled_axes() if run.handle.info.is_embedded else None
    figures = held_out(run.records, run.fitted, bundled)
    run.stamp()  # the card's time and memory are the run's so far, not the last invocation's
    run.card = build_card(
        handle=run.handle,
        template=run.template,
        settings=run.settings.to_dict(),
        budget=run.budget,
        records=run.records,
        fitted=run.fitted,
        figures=figures,
        artifacts=artifacts_of(run, pending),
        state=run.work.state,
        rows_file={"path": shown(run.rows_file), "sha256": sha256(run.rows_file)},
        created=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    save_card(run.card, [run.folder] + ([run.out] if run.out is not None else []))


# -- the table ---------------------------------------------------------------------------------------------------


def _rows_left(run: Run) -> float | None:
    pace = run.tracker.pace.get("rows")
    if pace is None:
        return None
    seconds = max(0, run.budget.row_cap - run.counts["scored"]) * pace
    cap = run.budget.time_cap
    return seconds if cap is None else min(seconds, max(0.0, cap * 60 - run.elapsed() - FIT_RESERVE_S))


def _pks_left(run: Run) -> float | None:
    if run.work.done("redeep-pks"):
        return 0.0
    pace = run.tracker.pace.get("redeep-pks") or PKS_COST * run.tracker.pace.get("rows", 0.0)
    if not pace:
        return None
    rows = run.counts["scored"] if run.work.done("rows") else max(run.budget.row_cap, run.counts["scored"])
    seconds = max(0, rows - len(run.work.pks_scores())) * pace
    cap = run.budget.time_cap
    return seconds if cap is None else min(seconds, max(0.0, cap * 60 - run.elapsed() + run.late_from))


def _swaps_left(run: Run) -> float | None:
    pace = run.tracker.pace.get("swap") or SWAP_COST * run.tracker.pace.get("rows", 0.0)
    if not pace:
        return None
    scored, agreeing = run.counts["scored"], run.counts["agreeing"]
    to_score = 0 if run.work.done("rows") else max(0, run.budget.row_cap - scored)
    share = agreeing / scored if scored else 0.35
    return (max(0, agreeing - run.counts["swapped"]) + to_score * share) * pace


def _fixed(stage: str, default_s: float) -> Callable[[Run], float | None]:
    return lambda run: run.tracker.pace.get(stage, default_s)


@dataclass(frozen=True)
class Stage:
    """One stage of the table.

    Attributes:
        run: does the stage's work; returns the seconds to record as it is marked done (``None``: not marked).
        skip_when_done: a resumed run skips it once done (its results are in the work folder).
        estimate: the seconds it has left (``None``: not measured yet), for the whole job's time left.
        makes: the fits it makes (:data:`core.evaluation.calibrate.save.ARTIFACT_NAMES`), pending until it ran.
    """

    name: str
    run: Callable[[Run], float | None]
    skip_when_done: bool
    estimate: Callable[[Run], float | None]
    makes: tuple[str, ...] = ()


STAGES: tuple[Stage, ...] = (
    Stage("radar", radar_stage, False, lambda run: 0.0),
    Stage("rows", rows_stage, True, _rows_left),
    Stage("swap", swap_stage, True, _swaps_left),
    Stage("headline", headline_stage, False, _fixed("headline", FIT_RESERVE_S / 4), HEADLINE_FITS),
    Stage("crm-basis", crm_stage, False, lambda run: run.crm_seconds()),
    Stage("redeep-pks", pks_stage, False, _pks_left),
    Stage("detectors", detectors_stage, False, _fixed("detectors", FIT_RESERVE_S / 2), DETECTOR_FITS),
    Stage("card", card_stage, False, _fixed("card", FIT_RESERVE_S / 4)),
)
"""The run, in order (see the module docstring)."""
STAGE_NAMES = tuple(s.name for s in STAGES)


def fits_after(stage: str) -> tuple[str, ...]:
    """The fits the stages after ``stage`` make: pending on a card written at ``stage``."""
    return tuple(name for s in STAGES[STAGE_NAMES.index(stage) + 1 :] for name in s.makes)


def reopen_from(work: Work, stage: str) -> None:
    """Mark ``stage`` and every stage after it as not done (what they stored is kept): they run again."""
    work.reopen(STAGE_NAMES[STAGE_NAMES.index(stage) :])


def _later(run: Run, index: int) -> Callable[[], float | None]:
    def left() -> float | None:
        parts = [s.estimate(run) for s in STAGES[index + 1 :] if not (s.skip_when_done and run.work.done(s.name))]
        return None if any(p is None for p in parts) else float(sum(p or 0.0 for p in parts))

    return left


def run_stages(run: Run) -> None:
    """Every stage of :data:`STAGES` in order, each marked done in the work state as it ends."""
    run.late_from = run.elapsed() if run.work.done("headline") else 0.0
    for index, stage in enumerate(STAGES):
        if stage.skip_when_done and run.work.done(stage.name):
            continue
        run.tracker.position = (index + 1, len(STAGES))
        run.tracker.later = _later(run, index)
        seconds = stage.run(run)
        if seconds is not None:
            run.work.finish(stage.name, seconds)
