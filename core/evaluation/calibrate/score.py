"""The scoring stages of a calibration: the rows (knownness checked with the model, scored in batches, every
detector's score and the fitted detectors' per-row features read from each row's one recording) and the swap tests
of the rows whose context agrees with memory. Each batch is appended to the work folder before the next starts."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from core.detectors import keys
from core.detectors.agreement import cheap_detectors
from core.detectors.combined import FEATURES, raw_features
from core.detectors.crm import displacement_for
from core.detectors.lookback import features as lookback_features
from core.detectors.registry import DetectorInput
from core.detectors.shared import plan, redeep_trace_for, release
from core.engine import DualPathSettings, ScoreRequest, score_batch
from core.engine.axes import observe
from core.engine.matching import find_spans
from core.engine.prepare import prepare_prompts
from core.engine.swap import run_swap_tests
from core.evaluation.calibrate.budget import FIT_RESERVE_S, SWAP_COST
from core.evaluation.calibrate.checkpoints import CRM_SCORES, KNOWN, PKS_SCORES, SCORED, SWAPS, Work
from core.evaluation.calibrate.fill import Filler
from core.evaluation.calibrate.fits import SWAP_LEVEL, ecs_only
from core.evaluation.calibrate.records import LATE_FEATURES, LIVE_EXCLUDED, RowRecord
from core.evaluation.calibrate.rows import SEED, Unit
from core.evaluation.conflict import AnswerCache, BuildOptions, generate_answers
from core.evaluation.constructions import CALIBRATION, ValidationRow, labeled_by_swap
from core.evaluation.headline_fit import row_key
from core.methods.crm import load_basis
from core.methods.crm.store import CRM_BASIS
from core.methods.redeep import DEFAULT_K_PERCENT, redeep_trace, row_means
from core.model.handle import ModelHandle, check_cancelled
from core.model.memory import release_freed

if TYPE_CHECKING:
    from core.evaluation.calibrate.stages import Run

KNOWN_TOKENS = 16
"""Knownness: the greedy no-context answer's length (tokens), as the bundled rows were built."""
CRM_FEATURES = ("crm_lts",)
"""The combined detector's features read from the CRM basis (computed later for rows scored before it existed)."""


def _known(answer: str | None, unit: Unit) -> bool:
    if unit.probe is None:
        return True
    return bool(answer) and bool(find_spans(answer or "", unit.probe.answer_memory))


def unit_stream(
    handle: ModelHandle, filler: Filler, work: Work, batch_size: int, known_log: dict[str, int]
) -> Iterator[Unit]:
    """The units in the filler's order (:class:`~core.evaluation.calibrate.fill.Filler`: the seeded order, with the
    calibration slots filling the behavior that is short), those whose fact the model does not know left out
    (knownness asked in batches, cached in the work folder)."""
    cache = AnswerCache(work.folder / KNOWN, handle.info.name, KNOWN_TOKENS)
    options = BuildOptions(max_new_tokens=KNOWN_TOKENS, batch_size=batch_size, seed=SEED)
    step = max(batch_size * 2, 8)
    while chunk := filler.next_units(step):
        probes = [(u.probe.query, None) for u in chunk if u.probe is not None]
        answers = iter(generate_answers(handle, probes, options, stage="knownness", cache=cache) if probes else [])
        for unit in chunk:
            known = _known(next(answers) if unit.probe is not None else None, unit)
            if unit.probe is not None:
                known_log["known" if known else "unknown"] = known_log.get("known" if known else "unknown", 0) + 1
            if known:
                yield unit


def fits_budget(handle: ModelHandle, row: ValidationRow, settings: DualPathSettings) -> bool:
    """Whether the row's prompts and answer fit the model's token budget (a row that does not is left out)."""
    try:
        prepare_prompts(handle, row.query, row.context, settings)
    except ValueError:
        return False
    return True


def _features(rec: RowRecord, inp: DetectorInput, T: int) -> None:
    """The fitted detectors' per-row features of one row into ``rec`` (a refusal noted in ``rec.errors``); ReDeEP's
    PKS later (:func:`read_pks`)."""
    try:
        rec.lookback = [float(v) for v in lookback_features(inp)]
    except ValueError as exc:
        rec.errors["lookback_features"] = str(exc)
    try:
        ecs, _ = row_means(redeep_trace_for(inp, ecs_only()))
        rec.ecs = ecs.tolist()
    except ValueError as exc:
        rec.errors["redeep_features"] = str(exc)
    for name in FEATURES:
        if name in LATE_FEATURES:
            continue
        try:
            rec.combined[name] = float(raw_features(inp, (name,), T)[0])
        except ValueError as exc:
            rec.combined[name] = None
            rec.errors.setdefault(f"combined:{name}", str(exc))


def score_rows(
    handle: ModelHandle, rows: Sequence[ValidationRow], settings: DualPathSettings, basis: Any
) -> list[RowRecord]:
    """One batch: the runs (recorded while they generate), then per row every live detector's score and the
    per-row features of the fitted detectors, from the row's shared pass."""
    request = ScoreRequest(settings=settings, free_parametric=True, record=True)
    results = score_batch(handle, [(r.query, r.context) for r in rows], request)
    detectors = [d for d in cheap_detectors() if d.name not in LIVE_EXCLUDED]
    out = []
    for row, res in zip(rows, results):
        inp = DetectorInput(handle=handle, result=res, settings=settings)
        if basis is not None:
            inp.cache[keys.CRM_BASIS] = basis  # this run's own basis (the embedded model's bundled one is the same)
        plan(inp, detectors)
        rec = RowRecord(row_key(row), row, res)
        for d in detectors:
            try:
                value = float(d.score(inp))
                rec.scores[d.name] = value if np.isfinite(value) else None
            except Exception as exc:  # noqa: BLE001 - one detector failing on one row must not lose the run
                rec.scores[d.name] = None
                rec.errors[d.name] = f"{type(exc).__name__}: {exc}"
        _features(rec, inp, settings.score_window)
        if basis is None:  # the CRM scores are read from it once the basis exists (read_crm_scores)
            try:
                rec.crm_displacement = np.asarray(displacement_for(inp), dtype=np.float32).tolist()
            except ValueError as exc:
                rec.errors["crm_displacement"] = str(exc)
        release(inp)
        res.internals = None
        out.append(rec)
    return out


def read_crm_scores(run: Run) -> int:
    """The CRM detectors' scores and the combined detector's CRM features of the rows scored before the CRM basis
    existed, from each row's stored displacement and the basis (:attr:`Run.basis`), appended to ``crm.jsonl``;
    returns how many rows."""
    late = run.work.crm_scores()
    todo = [r for r in run.work.records().values() if r.crm_displacement is not None and r.key not in late]
    detectors = [d for d in cheap_detectors() if d.name not in LIVE_EXCLUDED and d.artifact is CRM_BASIS]
    for start in range(0, len(todo), run.batch_size):
        check_cancelled()
        entries = []
        for r in todo[start : start + run.batch_size]:
            inp = DetectorInput(handle=run.handle, result=r.result, settings=run.settings)
            inp.cache[keys.CRM_BASIS] = run.basis
            inp.cache[keys.CRM_DISPLACEMENT] = np.asarray(r.crm_displacement, dtype=np.float32)
            entry: dict[str, Any] = {"key": r.key, "scores": {}, "combined": {}, "errors": {}}
            for d in detectors:
                try:
                    value = float(d.score(inp))
                    entry["scores"][d.name] = value if np.isfinite(value) else None
                except Exception as exc:  # noqa: BLE001 - as in score_rows
                    entry["scores"][d.name] = None
                    entry["errors"][d.name] = f"{type(exc).__name__}: {exc}"
            for name in CRM_FEATURES:
                try:
                    entry["combined"][name] = float(raw_features(inp, (name,), run.settings.score_window)[0])
                except ValueError as exc:
                    entry["combined"][name] = None
                    entry["errors"][f"combined:{name}"] = str(exc)
            entries.append(entry)
        run.work.append(CRM_SCORES, entries)
    return len(todo)


def _pks_entry(run: Run, record: RowRecord) -> dict[str, Any]:
    try:
        _, pks = row_means(redeep_trace(run.handle, record.result, DEFAULT_K_PERCENT))
    except ValueError as exc:
        return {"key": record.key, "pks": None, "error": str(exc)}
    if pks is None or not np.all(np.isfinite(pks)):
        refusal = "this model's PKS is refused (see ReDeEP's page)" if pks is None else "a layer's PKS is not finite"
        return {"key": record.key, "pks": None, "error": refusal}
    return {"key": record.key, "pks": pks.tolist(), "error": None}


def read_pks(run: Run, stop: Callable[[float], bool]) -> tuple[int, int]:
    """ReDeEP's every-layer PKS (its mean over the answer, per layer) of the scored rows that have none yet, each
    from a traced forward of its stored run, appended to ``pks.jsonl`` row by row — calibration rows first (ReDeEP's
    choice is fitted on them) — until ``stop(seconds the next row needs)``; returns (rows done now, rows left)."""
    late = run.work.pks_scores()
    todo = [r for r in run.work.records().values() if r.pks is None and r.ecs is not None and r.key not in late]
    todo.sort(key=lambda r: r.row.split != CALIBRATION)
    run.tracker.begin("redeep-pks", len(todo))
    for n, record in enumerate(todo):
        check_cancelled()
        if stop(run.tracker.pace.get("redeep-pks", 0.0)):
            return n, len(todo) - n
        t0 = time.monotonic()
        run.work.append(PKS_SCORES, [_pks_entry(run, record)])
        run.tracker.measured("redeep-pks", time.monotonic() - t0, 1)
        run.tracker.report(n + 1)
    return len(todo), 0


def _flush(run: Run, records: dict[str, RowRecord], batch: list[ValidationRow]) -> None:
    """Score one batch and append it to ``scored.jsonl``."""
    t0 = time.monotonic()
    new = score_rows(run.handle, batch, run.settings, run.basis)
    run.work.append(SCORED, [r.to_dict() for r in new])
    for r in new:
        records[r.key] = r
    seconds = time.monotonic() - t0
    run.work.add_seconds("rows", seconds)
    run.tracker.measured("rows", seconds, len(batch))
    run.work.save()
    run.count(records)
    cap = run.budget.row_cap
    run.tracker.total = max(cap, len(records)) if run.budget.minutes is None else len(records) + run.batch_size
    run.tracker.report(len(records))
    release_freed()  # the batch's blocks back to the system before the next batch


def rows_reserve(run: Run, records: dict[str, RowRecord]) -> float:
    """The seconds the headline's stages after the rows need, taken at every batch from the pace measured by then:
    the swap tests of the agreeing rows scored so far (at the swap pace, else :data:`SWAP_COST` rows each — a fresh
    run has measured no swap test yet) and the fits. The detectors' later stages (the CRM basis, ReDeEP's PKS) are
    not reserved for: they take the time the cap has left, and what it does not leave stays pending."""
    agreeing = sum(labeled_by_swap(r.row) for r in records.values() if r.swap is None)
    swap_pace = run.tracker.pace.get("swap") or run.tracker.pace.get("rows", 0.0) * SWAP_COST  # measured early
    return FIT_RESERVE_S + agreeing * swap_pace


def rows_stage(run: Run) -> float:
    """Score the units in order until the budget is spent (a number of rows, or the time the stages after the rows
    need); records what stopped it in the state's ``rows``."""
    work, tracker, budget, batch_size = run.work, run.tracker, run.budget, run.batch_size
    run.basis = load_basis(run.handle, run.template)  # None: the CRM scores are read after the basis is computed
    records = work.records()
    cap = budget.row_cap
    known_log: dict[str, int] = {}
    chosen = 0
    pending: list[ValidationRow] = []
    tracker.begin("rows", cap if budget.minutes is None else max(cap, len(records)))
    if budget.minutes is not None:
        tracker.total = len(records) + 1
    stopped = None
    too_long = 0
    filler = Filler(run.order, records)
    for unit in unit_stream(run.handle, filler, work, batch_size, known_log):
        if chosen >= cap:
            break
        fitting = [r for r in unit.rows if fits_budget(run.handle, r, run.settings)]
        too_long += len(unit.rows) - len(fitting)
        chosen += len(fitting)
        pending += [r for r in fitting if row_key(r) not in records]
        while len(pending) >= batch_size:
            check_cancelled()
            if run.over_deadline(tracker.pace.get("rows", 0.0) * batch_size + rows_reserve(run, records)):
                stopped = "the minutes budget" if budget.minutes is not None else "the default's time cap"
                break
            batch, pending = pending[:batch_size], pending[batch_size:]
            _flush(run, records, batch)
            measure_swap_pace(run, records)
        if stopped:
            break
    if pending and not stopped:
        check_cancelled()
        _flush(run, records, pending)
    work.state["rows"] = {
        "chosen": chosen,
        "knownness": known_log,
        "too_long": too_long,
        "stopped_by": stopped or "the row budget",
        "fill": filler.to_dict(),
    }
    work.save()
    return 0.0


def _swap_batch(run: Run, part: Sequence[RowRecord]) -> None:
    """Swap-test one batch of scored rows, append the tests to ``swap.jsonl`` and measure the swap pace."""
    t0 = time.monotonic()
    spans = [observe(r.result, SWAP_LEVEL).span for r in part]
    tests = run_swap_tests(run.handle, [r.result for r in part], spans, batch_size=run.batch_size)
    run.work.append(SWAPS, [{"key": r.key, "swap": t.to_dict()} for r, t in zip(part, tests)])
    for r, t in zip(part, tests):
        r.swap = t
    seconds = time.monotonic() - t0
    run.work.add_seconds("swap", seconds)
    run.tracker.measured("swap", seconds, len(part))
    run.work.save()
    run.counts["swapped"] += len(part)


def measure_swap_pace(run: Run, records: dict[str, RowRecord]) -> None:
    """While the rows are scored, swap-test the first batch of rows labeled by swap tests once there is one, so the
    rows stage reserves the swap tests at this model's measured pace, not a guess (a swap test cost 0.85 rows on
    the embedded model and 1.9 on Gemma 3 270M: the guess let Gemma's default run overrun its cap)."""
    if "swap" in run.tracker.pace:
        return
    todo = [r for r in records.values() if labeled_by_swap(r.row) and r.swap is None]
    if len(todo) >= run.batch_size:
        check_cancelled()
        _swap_batch(run, todo[: run.batch_size])


def swap_stage(run: Run) -> float:
    """Swap-test the scored rows whose context agrees with memory and have no swap test yet, batch by batch."""
    work, tracker, batch_size = run.work, run.tracker, run.batch_size
    records = work.records()
    done = work.swaps()
    todo = [r for r in records.values() if labeled_by_swap(r.row) and r.key not in done]
    total = len(todo)
    if "swap" not in tracker.pace and "rows" in tracker.pace:
        tracker.pace["swap"] = tracker.pace["rows"] * SWAP_COST
    tracker.begin("swap", total)
    for start in range(0, total, batch_size):
        check_cancelled()
        _swap_batch(run, todo[start : start + batch_size])
        tracker.report(start + len(todo[start : start + batch_size]))
    return 0.0
