"""The calibration as one call (:func:`calibrate_model`) and its estimate before a start (:func:`estimate_calibration`).

:func:`calibrate_model` checks what it is given before any work (the budget, the ``out`` folder, the batch size),
takes the work folder's lock (a second run of the same folder is refused), opens the checkpoints (damage named,
what can be skipped skipped), and runs the stage table (:data:`core.evaluation.calibrate.stages.STAGES`). Whatever
stops it — a cancel, Ctrl-C, an error — the state is saved and the exception carries a note of what was kept
(rows scored, swap tests, artifacts written), which the command line and the page show.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

from core.engine import DualPathSettings
from core.evaluation.calibrate.budget import FIT_RESERVE_S, SWAP_COST, Budget, batch_size_for
from core.evaluation.calibrate.checkpoints import SCORED, STATE, Work, empty_folder, hold_lock
from core.evaluation.calibrate.progress import Tracker
from core.evaluation.calibrate.rows import ROWS_CSV, SEED, order_units, read_rows, units_of
from core.evaluation.calibrate.save import ARTIFACT_NAMES
from core.evaluation.calibrate.score import KNOWN_TOKENS
from core.evaluation.calibrate.stages import Run, reopen_from, run_stages, sha256
from core.model import calibration_store
from core.model.handle import CancelToken, ModelHandle, run_control
from core.model.memory import fix_mmap_threshold
from core.model.progress import Progress
from core.model.prompts import resolve_template


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process so far (every thread): a machine's load does not inflate it."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _peak_rss_mb() -> float:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(rss / (1024 * 1024 if sys.platform == "darwin" else 1024), 1)


def _out_folder(out: str | Path | None) -> Path | None:
    if out is None:
        return None
    if not str(out).strip():
        raise ValueError("--out is empty: give the folder for the run's checkpoints and the card, or leave it out")
    return Path(out)


def kept(run: Run) -> str:
    """What a stopped run kept, in words: rows scored, swap tests, the artifacts written."""
    what = [f"{run.counts['scored']} rows scored", f"{run.counts['swapped']} swap tests"]
    written = [s for s in ("crm-basis", "radar", "redeep-pks") if run.notes.get(s, "").startswith(("computed", "kept"))]
    written += [ARTIFACT_NAMES[name] for name in ARTIFACT_NAMES if name in run.paths]
    artifacts = ", ".join(written) if written else "no artifact yet"
    return (
        f"kept {', '.join(what)} and {artifacts} (in {run.work.folder}); "
        "run the same command (or start it again) to continue from them"
    )


def calibrate_model(
    handle: ModelHandle,
    *,
    budget: Budget | str | int | None = None,
    out: str | Path | None = None,
    progress: Progress | None = None,
    cancel: CancelToken | None = None,
    rows_path: str | Path | None = None,
    batch_size: int | None = None,
    seed: int = SEED,
    restart: bool = False,
    settings: DualPathSettings | None = None,
) -> dict[str, Any]:
    """Calibrate ``handle``'s model in one step (:mod:`core.evaluation.calibrate`) and return its calibration card.

    Args:
        budget: a :class:`Budget` or its text (``"240"`` rows, ``"30m"`` minutes); default :data:`DEFAULT_ROWS` rows.
        out: the folder of the run's checkpoints and a copy of the card (default: ``work/`` in the model's
            calibration folder, the card beside it).
        progress: ``progress(done, total, text)``: the stage, its progress and the whole job's time left.
        cancel: ends the run at its next token or batch (:class:`~core.model.handle.RunCancelled`); what was
            scored stays, and the next call continues from it.
        rows_path: a validation rows CSV instead of the bundled one (tests; another language's rows).
        batch_size: rows per padded batch (default: :func:`batch_size_for`, 8 on the embedded model, 4 on a
            262k-token vocabulary).
        restart: drop the checkpoints and start over.
        settings: the run settings the rows are scored with (default: the app's, :class:`DualPathSettings`;
            the card records them). Another setting calibrates another use of the model: tests use fewer tokens.

    Returns:
        The card (:func:`core.evaluation.model_card.build_card`), also written as ``card.json`` / ``card.txt``.

    Raises:
        ValueError: a bad budget, ``out`` or batch size, a rows file without rows, a work folder of another model,
            in use by another run, or with a damaged checkpoint (the message names the file).
        RunCancelled: the run was cancelled (its note says what was kept).
    """
    budget = budget if isinstance(budget, Budget) else Budget.parse(budget)
    out_folder = _out_folder(out)
    settings = settings or DualPathSettings()
    settings.validate()
    batch_size = batch_size_for(handle, settings) if batch_size is None else batch_size
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    path = Path(rows_path) if rows_path is not None else ROWS_CSV
    order = order_units(units_of(read_rows(path)), seed)
    if not order:
        raise ValueError(f"{path} has no calibration or report rows")
    fix_mmap_threshold()  # see core.model.memory: a long run's peak stays at what it holds
    template = resolve_template(settings.template, handle.tokenizer).key
    folder = calibration_store.claim_folder(handle, template)
    work_folder = out_folder / "work" if out_folder is not None else folder / calibration_store.WORK
    with hold_lock(work_folder):
        if restart:
            empty_folder(work_folder)
        work = Work(work_folder, handle, template)
        tracker = Tracker(progress, work, budget)
        run = Run(
            handle, template, folder, out_folder, work, tracker, settings, budget, batch_size, order, path, _cpu_seconds
        )
        _resume(run, budget)
        _run(run, cancel)
    assert run.card is not None
    tracker.begin("done", 1)
    return run.card


def _same_rows(run: Run) -> None:
    """Refuse a work folder whose rows came from another rows file (its scored rows would be mixed into the fits)."""
    digest = sha256(run.rows_file)
    before = run.work.state.get("rows_sha256")
    if before is not None and before != digest:
        raise ValueError(
            f"{run.work.folder} holds a calibration on another rows file (sha256 {str(before)[:12]}…, this one "
            f"{digest[:12]}…); choose another --out folder or start over with --restart"
        )
    run.work.state["rows_sha256"] = digest


def _resume(run: Run, budget: Budget) -> None:
    """Reopen what the checkpoints lost or another budget changes; say what was skipped."""
    _same_rows(run)
    work = run.work
    for text in work.notices:
        run.tracker.say(text)
    if work.reopen_from is not None:
        reopen_from(work, work.reopen_from)
    previous = work.state.get("budget")
    if previous is not None and previous != budget.to_dict():
        reopen_from(work, "rows")  # another budget: score on from the rows kept (a larger one), then fit again
    work.state["budget"] = budget.to_dict()
    run.notes = dict(work.state.get("notes", {}))
    run.count(work.records())


def _run(run: Run, cancel: CancelToken | None) -> None:
    work = run.work
    started_wall = time.monotonic()
    before = float(work.state.get("elapsed", 0.0))
    cpu_before, cpu_start = float(work.state.get("cpu_seconds", 0.0)), _cpu_seconds()

    def elapsed() -> float:
        return before + time.monotonic() - started_wall

    def stamp() -> None:
        work.state["elapsed"] = round(elapsed(), 1)
        work.state["cpu_seconds"] = round(cpu_before + _cpu_seconds() - cpu_start, 1)
        work.state["peak_rss_mb"] = max(_peak_rss_mb(), float(work.state.get("peak_rss_mb", 0.0)))

    run.elapsed = run.tracker.elapsed = elapsed  # until now a stand-in
    run.stamp = stamp
    try:
        with run_control(cancel):
            run_stages(run)
    except BaseException as exc:
        note = kept(run)
        exc.add_note(note)
        run.tracker.say(f"stopped: {note}")
        raise
    finally:
        stamp()
        work.save()


def estimate_calibration(handle: ModelHandle, budget: Budget | None = None) -> Any:
    """How long a calibration of ``handle``'s model with ``budget`` will take on this machine, for the page.

    * A minutes budget is its own estimate (seconds); the default's time cap bounds the others.
    * A run that was cancelled or killed left its measured paces in the model's work folder
      (:func:`core.model.calibration_store.work_folder`): the rows still to score × the measured seconds per row,
      the swap tests of about a third of them, and the fits (seconds).
    * Otherwise, from this machine's measured costs per generated token and per forward pass
      (:func:`core.engine.estimate.estimate`, an :class:`~core.engine.estimate.Estimate`; ``None`` before any run
      measured them): each row's two answers decoded in batches (a step of a batch of b rows is counted as b
      single-row steps: a CPU's cost grows about with the rows), a swap test for about a
      third of the rows, the knownness answers of about half, the detectors' passes, and the CRM basis and RADAR
      prompts when they are not already there.
    """
    budget = budget or Budget()
    if budget.minutes is not None:
        return budget.minutes * 60.0
    cap = budget.time_cap
    rows = budget.row_cap
    template = resolve_template(DualPathSettings().template, handle.tokenizer).key
    state_path = calibration_store.work_folder(handle, template) / STATE
    try:
        state = json.loads(state_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        state = {}
    pace = (state.get("pace") if isinstance(state, dict) else None) or {}
    if isinstance(pace, dict) and isinstance(pace.get("rows"), (int, float)) and pace["rows"] > 0:
        scored = _count_lines(state_path.parent / SCORED)
        left = max(0, rows - scored)
        swap = float(pace.get("swap") or pace["rows"] * SWAP_COST)
        seconds = left * float(pace["rows"]) + (scored + left) * 0.35 * swap + FIT_RESERVE_S
        return seconds if cap is None else min(seconds, cap * 60.0)
    return _estimate_from_costs(handle, template, rows, cap)


def _estimate_from_costs(handle: ModelHandle, template: str, rows: int, cap: float | None) -> Any:
    from core.engine.estimate import estimate
    from core.methods.crm import load_basis
    from core.methods.radar import feature_table_for

    tokens = DualPathSettings().max_new_tokens
    generated = rows * tokens + rows * 0.35 * (tokens + 36) + rows * 0.5 * KNOWN_TOKENS
    forwards = rows * 4
    if load_basis(handle, template) is None:  # two forwards per CRM calibration prompt
        from core.methods.crm.prompts import load_calibration_prompts

        forwards += 2 * len(load_calibration_prompts())
    if feature_table_for(handle, compute=False) is None:  # about one pass per RADAR prompt
        from core.methods.radar.prompts import load_prompt_sets

        forwards += len(load_prompt_sets())
    found = estimate(handle, generated_tokens=generated, forwards=forwards)
    if found is not None and cap is not None and found.seconds > cap * 60.0:
        return cap * 60.0  # the default's time cap ends it first
    return found


def _count_lines(path: Path) -> int:
    """The non-blank lines of a checkpoint (0 when it is missing or no regular file: never blocks on a pipe)."""
    try:
        if not path.is_file():
            return 0
        with path.open(encoding="utf-8", errors="replace") as fh:
            return sum(1 for line in fh if line.strip())
    except OSError:
        return 0


__all__ = ["calibrate_model", "estimate_calibration", "kept"]
