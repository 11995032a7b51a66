"""One-step calibration of every per-model artifact for any model (``python -m core calibrate-model``).

From the bundled behavior data — ``assets/validation/rows.csv``: ROME facts asked with the relation's question and
stated in the context (conflicting, agreeing, on-topic), NQ-Swap passages (substituted or as written), the project's
conflict and invented-fact rows, and the fresh construction for reporting only, with the grouped split of
:mod:`core.evaluation.constructions` — :func:`calibrate_model` builds the model's **own** behavior-labeled rows and
fits everything that turns a score into a verdict for it. Stages, each checkpointed in the run's work folder so a
killed run continues where it stopped:

1. **CRM basis** — two forwards per bundled calibration prompt (:func:`core.methods.crm.compute_basis`); kept when
   a current one exists (the embedded model's is bundled).
2. **RADAR assets** — the 37 features of RADAR's bundled prompt sets, its ensemble and test report
   (:func:`core.methods.radar.feature_table_for`); kept when current.
3. **Rows** — the units of the bundled rows (a ROME fact's rows, an NQ-Swap question's pair, a project row) in a
   seeded order that interleaves the calibration and report splits and the constructions, so any prefix is a
   balanced sample. Knownness is checked with the model: a ROME fact's rows are kept only when the model's greedy
   answer to the relation's question without context (16 tokens, cached) names the fact's object. The kept rows are
   scored in batches with the app's default settings (:class:`~core.engine.settings.DualPathSettings`, the
   parametric answer generated), and each row's detector scores and per-row features are taken from the batch's own
   recording (every cheap detector; the Lookback Lens' ratios; ReDeEP's ECS and PKS; the combined detector's
   features). Until the budget is spent: a number of rows, or minutes (then the rows stop early enough for the
   stages after them).
4. **Swap tests** of the scored rows whose context agrees with memory (:mod:`core.engine.swap`): their labels.
5. **Fits** on the calibration rows only (:func:`core.evaluation.model_fits.fit_all`), written to the artifact store
   under the model's slug (name + source: the hub revision or the GGUF file's sha256) and resolved template, where
   the app, the CLI and the audit service find them: τ and τ(L), the axes calibration, the per-detector thresholds
   (the model's calibration folder, :mod:`core.model.calibration_store`), the Lookback Lens classifier, ReDeEP's
   choice and its table, the combined detector (their own caches, :mod:`core.model.artifacts`).
6. **Card** — the held-out figures of the report rows (grouped split, never fitted on) with their confidence
   intervals, the budget and what a smaller one costs (:mod:`core.evaluation.model_card`).

Progress: ``progress(done, total, text)`` after every batch, the text naming the stage and an estimate of the time
left (from the measured pace of this run, kept across a resume). Cancel: a :class:`~core.model.handle.CancelToken`
(checked at every generated token and between batches); the rows scored so far stay in the work folder.
"""

from __future__ import annotations

import csv
import hashlib
import json
import logging
import random
import re
import resource
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from core.detectors import keys
from core.detectors.agreement import cheap_detectors
from core.detectors.combined import FEATURES, raw_features
from core.detectors.combined import cache_model_path as combined_path
from core.detectors.lookback import features as lookback_features
from core.detectors.registry import DetectorInput
from core.detectors.shared import plan, redeep_trace_for, release
from core.engine import DualPathSettings, ScoreRequest, score_batch
from core.engine.axes import observe
from core.engine.axes_calibration import bundled_axes
from core.engine.matching import find_spans
from core.engine.prepare import prepare_prompts
from core.engine.swap import SwapTest, run_swap_tests
from core.evaluation.conflict import AnswerCache, BuildOptions, generate_answers
from core.evaluation.constructions import AGREEING, CALIBRATION, REPORT, TEMPLATED, ValidationRow
from core.evaluation.headline_fit import row_key
from core.evaluation.model_card import build_card, write_card
from core.evaluation.model_fits import (
    LATE_FEATURES,
    LIVE_EXCLUDED,
    Fitted,
    ModelIdentity,
    RowRecord,
    every_layer,
    fit_all,
    held_out,
)
from core.io import asset_path, atomic_write_json
from core.methods.crm import compute_basis, load_basis
from core.methods.crm.store import cache_basis_path
from core.methods.lookback.model import LOOKBACK_MODEL
from core.methods.radar import classifier_from_table, evaluation_for, feature_cache_path, feature_table_for
from core.methods.redeep import ov_copying_scores, row_means
from core.methods.redeep.choice import REDEEP_TABLE, cache_choice_path
from core.model import artifacts, calibration_store
from core.model.handle import CancelToken, ModelHandle, check_cancelled, run_control
from core.model.memory import fix_mmap_threshold, release_freed
from core.model.progress import Progress
from core.model.prompts import resolve_template

logger = logging.getLogger(__name__)

ROWS_CSV = asset_path("validation", "rows.csv")
"""The bundled behavior rows (built by ``scripts/validate_headline.py build`` from facts and passages written by
others; the calibration never reads anything outside ``assets/``)."""
DEFAULT_ROWS = 240
"""The default budget: rows scored (calibration and report together), within :data:`DEFAULT_MINUTES`."""
DEFAULT_MINUTES = 55.0
"""The default budget's time cap: the default run stops scoring rows early enough for the swap tests, the fits and
the card to end within this many minutes (the first stages included). On a 2-core CPU the embedded model scores
about 20 s a row and Gemma 3 270M about 30 s after an 18-minute CRM basis (docs/calibration.md), so the cap, not
the 240 rows, ends Gemma's default run; its card says how many rows it scored and what that costs."""
MAX_ROWS = 2000
"""The most rows a minutes budget may score."""
KNOWN_TOKENS = 16
"""Knownness: the greedy no-context answer's length (tokens), as the bundled rows were built."""
SWAP_LEVEL = 1.0
"""κ (nats) at which the swap test locates the span to swap, before κ is fitted (as the bundled pipeline)."""
FIT_RESERVE_S = 60.0
"""Seconds kept for the fits and the card when a minutes budget decides when the scoring stops."""
SWAP_COST = 0.7
"""A swap test's cost in scored rows (one retrieval-path generation and a few completion steps), before it is
measured."""
MAX_BATCH_ROWS = 8
"""The most rows per batch (:func:`batch_size_for`)."""
BATCH_LOGITS_BYTES = 768 << 20
"""What one batch's float32 logits may hold (both answers while they are generated, the teacher-forced pass): on a
262k-token vocabulary (Gemma 3) a row's three 64-token logit blocks take 200 MB, so its batches hold 4 rows; the
embedded model's (49k) hold :data:`MAX_BATCH_ROWS`."""
SEED = 0
STATE = "state.json"
SCORED = "scored.jsonl"
SWAPS = "swap.jsonl"
KNOWN = "known_answers.json"
STAGES = ("crm-basis", "radar", "rows", "swap", "fit", "card")
ARTIFACT_NAMES = {
    "tau": "tau",
    "axes": "axes",
    "detectors": "detector-thresholds",
    "lookback": "lookback-lens",
    "redeep": "redeep-choice",
    "combined": "combined-detector",
}
"""A fit's name in :class:`~core.evaluation.model_fits.Fitted` → its artifact's name on the card."""


# -- the budget -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Budget:
    """How much a calibration may spend: ``rows`` scored, or ``minutes`` of wall time (both ``None``: the default,
    :data:`DEFAULT_ROWS` rows within :data:`DEFAULT_MINUTES`)."""

    rows: int | None = None
    minutes: float | None = None

    @classmethod
    def parse(cls, text: str | int | None) -> Budget:
        """``None`` → the default; ``"240"`` / ``"240rows"`` → rows; ``"30m"`` / ``"30min"`` / ``"30minutes"`` →
        minutes.

        Raises:
            ValueError: anything else, or a budget below 8 rows / 1 minute.
        """
        if text is None or (isinstance(text, str) and not text.strip()):
            return cls()
        if isinstance(text, int):
            text = str(text)
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(rows?|m|min|mins|minutes?)?\s*", text.lower())
        if m is None:
            raise ValueError(f"--budget takes rows (e.g. 240 or 240rows) or minutes (e.g. 30m), got {text!r}")
        value, unit = float(m.group(1)), m.group(2) or "rows"
        if unit.startswith("row"):
            if value != int(value) or value < 8:
                raise ValueError(f"a budget in rows needs a whole number of at least 8, got {text!r}")
            return cls(rows=int(value))
        if value < 1:
            raise ValueError(f"a budget in minutes needs at least 1 minute, got {text!r}")
        return cls(minutes=value)

    @property
    def row_cap(self) -> int:
        """The most rows this budget scores."""
        if self.rows is not None:
            return self.rows
        return MAX_ROWS if self.minutes is not None else DEFAULT_ROWS

    @property
    def is_default(self) -> bool:
        return self.rows is None and self.minutes is None

    @property
    def time_cap(self) -> float | None:
        """The minutes this budget may take: its own, :data:`DEFAULT_MINUTES` for the default, ``None`` for rows."""
        if self.minutes is not None:
            return self.minutes
        return DEFAULT_MINUTES if self.is_default else None

    def describe(self) -> str:
        if self.minutes is not None:
            return f"{self.minutes:g} minutes"
        if self.is_default:
            return f"{self.row_cap} rows within {DEFAULT_MINUTES:g} minutes (the default)"
        return f"{self.row_cap} rows"

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "minutes": self.minutes,
            "row_cap": self.row_cap,
            "time_cap_minutes": self.time_cap,
            "default_rows": DEFAULT_ROWS,
        }


def batch_size_for(handle: ModelHandle, settings: DualPathSettings) -> int:
    """Rows per batch so that the batch's logits stay within :data:`BATCH_LOGITS_BYTES`: each row holds three
    ``max_new_tokens × V`` float32 blocks (its two generated answers, its teacher-forced parametric pass); between 1
    and :data:`MAX_BATCH_ROWS`."""
    per_row = 3 * max(1, settings.max_new_tokens) * max(1, handle.info.vocab_size) * 4
    return max(1, min(MAX_BATCH_ROWS, BATCH_LOGITS_BYTES // per_row))


# -- the rows: units in a balanced order ------------------------------------------------------------------------


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
    """The validation rows of a CSV in :class:`ValidationRow`'s columns (``ValueError`` for a file without them)."""
    with Path(path).open(encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        missing = {"construction", "relation", "query", "context", "split"} - set(reader.fieldnames or [])
        if missing:
            raise ValueError(f"{path}: not a validation rows file (missing {', '.join(sorted(missing))})")
        return [ValidationRow.from_dict(r) for r in reader]


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


# -- the work folder (checkpoints) ------------------------------------------------------------------------------


def _clean(value: Any) -> Any:
    """``value`` with NaN / ±inf floats replaced by ``None`` (strict JSON)."""
    if isinstance(value, float):
        return value if np.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


class Work:
    """A run's checkpoints: ``state.json`` (stages done, measured paces, elapsed time), ``known_answers.json``,
    ``scored.jsonl`` and ``swap.jsonl`` (one JSON line per row, appended after each batch)."""

    def __init__(self, folder: Path, handle: ModelHandle, template: str) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / STATE
        state = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        ident = {"model": handle.info.name, "slug": handle.slug, "template": template}
        if state and state.get("identity") != ident:
            raise ValueError(
                f"{folder} holds the checkpoints of another calibration ({state.get('identity')}); "
                "choose another --out folder or start over with --restart"
            )
        self.state: dict[str, Any] = state or {"identity": ident, "done": [], "pace": {}, "elapsed": 0.0}

    def save(self) -> None:
        atomic_write_json(self.folder / STATE, _clean(self.state))

    def done(self, stage: str) -> bool:
        return stage in self.state["done"]

    def finish(self, stage: str, seconds: float) -> None:
        if stage not in self.state["done"]:
            self.state["done"].append(stage)
        self.state.setdefault("seconds", {})[stage] = round(self.state.get("seconds", {}).get(stage, 0) + seconds, 1)
        self.save()

    def reopen(self, stage: str) -> None:
        """Mark ``stage`` and every stage after it (:data:`STAGES`) as not done; what they stored is kept."""
        later = set(STAGES[STAGES.index(stage) :])
        self.state["done"] = [s for s in self.state["done"] if s not in later]
        self.save()

    def add_seconds(self, stage: str, seconds: float) -> None:
        self.state.setdefault("seconds", {})[stage] = round(self.state.get("seconds", {}).get(stage, 0) + seconds, 1)

    def _lines(self, name: str) -> Iterator[dict[str, Any]]:
        path = self.folder / name
        if not path.is_file():
            return
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                try:
                    yield json.loads(line)
                except ValueError:
                    logger.warning("Ignoring a torn line of %s (a run killed while writing it)", path)

    def swaps(self) -> dict[str, SwapTest]:
        return {d["key"]: SwapTest.from_dict(d["swap"]) for d in self._lines(SWAPS)}

    def records(self) -> dict[str, RowRecord]:
        swaps = self.swaps()
        out: dict[str, RowRecord] = {}
        for d in self._lines(SCORED):
            out[d["key"]] = RowRecord.from_dict(d, swaps.get(d["key"]))
        return out

    def append(self, name: str, items: Sequence[dict[str, Any]]) -> None:
        with (self.folder / name).open("a", encoding="utf-8") as fh:
            for item in items:
                fh.write(json.dumps(_clean(item), ensure_ascii=False, allow_nan=False) + "\n")
            fh.flush()


# -- progress with an estimate -------------------------------------------------------------------------------------


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class Tracker:
    """Reports ``progress(done, total, text)`` with the stage and an estimate of the time left, from the paces this
    run measured (seconds per unit of each stage, kept in the work state across a resume)."""

    def __init__(self, progress: Progress | None, work: Work, budget: Budget) -> None:
        self.progress = progress
        self.work = work
        self.budget = budget
        self.stage = ""
        self.total = 0
        self.started = time.monotonic()
        self.later = 0.0

    @property
    def pace(self) -> dict[str, float]:
        return self.work.state.setdefault("pace", {})

    def measured(self, stage: str, seconds: float, units: int) -> None:
        if units > 0 and seconds > 0:
            old = self.pace.get(stage)
            new = seconds / units
            self.pace[stage] = new if old is None else 0.5 * old + 0.5 * new

    def begin(self, stage: str, total: int, later_s: float = 0.0) -> None:
        self.stage, self.total, self.later = stage, total, later_s
        self.report(0)

    def report(self, done: int, text: str = "") -> None:
        if self.progress is None:
            return
        pace = self.pace.get(self.stage)
        left = None if pace is None else pace * max(0, self.total - done) + self.later
        words = f"{self.stage} {done}/{self.total}"
        if text:
            words += f" · {text}"
        if left is not None:
            words += f" · about {_duration(left)} left"
        self.progress(done, max(self.total, 1), words)


# -- the stages -----------------------------------------------------------------------------------------------------


def _crm_stage(handle: ModelHandle, template: str, tracker: Tracker) -> tuple[Any, str]:
    basis = load_basis(handle, template)
    if basis is not None:
        return basis, "kept: a current CRM basis exists"
    t0 = time.monotonic()

    def on(done: int, total: int, _text: str = "") -> None:
        tracker.total = total
        tracker.measured("crm-basis", time.monotonic() - t0, done) if done == 1 else None
        tracker.report(done)

    tracker.begin("crm-basis", 0)
    basis = compute_basis(handle, progress=on, template=template)
    return basis, f"computed: {cache_basis_path(handle, template)}"


def _radar_stage(handle: ModelHandle, tracker: Tracker) -> str:
    kept = feature_table_for(handle, compute=False) is not None
    t0 = time.monotonic()

    def on(done: int, total: int, _text: str = "") -> None:
        tracker.total = total
        if done in (1, 8):
            tracker.measured("radar", time.monotonic() - t0, done)
        tracker.report(done)

    tracker.begin("radar", 0)
    table = feature_table_for(handle, compute=True, progress=on)
    if table is None:
        raise ValueError("RADAR's feature table could not be built")
    classifier_from_table(table)
    evaluation_for(handle, table)
    return "kept: a current feature table exists" if kept else f"computed: {feature_cache_path(handle)}"


def _known(answer: str | None, unit: Unit) -> bool:
    if unit.probe is None:
        return True
    return bool(answer) and bool(find_spans(answer or "", unit.probe.answer_memory))


def _unit_stream(
    handle: ModelHandle, order: Sequence[Unit], work: Work, batch_size: int, known_log: dict[str, int]
) -> Iterator[Unit]:
    """The units in order, those whose fact the model does not know left out (knownness asked in batches, cached
    in the work folder)."""
    cache = AnswerCache(work.folder / KNOWN, handle.info.name, KNOWN_TOKENS)
    options = BuildOptions(max_new_tokens=KNOWN_TOKENS, batch_size=batch_size, seed=SEED)
    step = max(batch_size * 2, 8)
    for start in range(0, len(order), step):
        chunk = order[start : start + step]
        probes = [(u.probe.query, None) for u in chunk if u.probe is not None]
        answers = iter(generate_answers(handle, probes, options, stage="knownness", cache=cache) if probes else [])
        for unit in chunk:
            known = _known(next(answers) if unit.probe is not None else None, unit)
            if unit.probe is not None:
                known_log["known" if known else "unknown"] = known_log.get("known" if known else "unknown", 0) + 1
            if known:
                yield unit


def _fits(handle: ModelHandle, row: ValidationRow, settings: DualPathSettings) -> bool:
    """Whether the row's prompts and answer fit the model's token budget (a row that does not is left out)."""
    try:
        prepare_prompts(handle, row.query, row.context, settings)
    except ValueError:
        return False
    return True


def _score_rows(
    handle: ModelHandle, rows: Sequence[ValidationRow], settings: DualPathSettings, basis: Any
) -> list[RowRecord]:
    """One batch: the runs (recorded while they generate), then per row every live detector's score and the
    per-row features of the fitted detectors, from the row's shared pass."""
    request = ScoreRequest(settings=settings, free_parametric=True, record=True)
    results = score_batch(handle, [(r.query, r.context) for r in rows], request)
    detectors = [d for d in cheap_detectors() if d.name not in LIVE_EXCLUDED]
    T = settings.score_window
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
        try:
            rec.lookback = [float(v) for v in lookback_features(inp)]
        except ValueError as exc:
            rec.errors["lookback_features"] = str(exc)
        try:
            ecs, pks = row_means(redeep_trace_for(inp, every_layer(handle.info.n_layers)))
            rec.ecs, rec.pks = ecs.tolist(), None if pks is None else pks.tolist()
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
        release(inp)
        res.internals = None
        out.append(rec)
    return out


def _rows_stage(
    handle: ModelHandle,
    work: Work,
    tracker: Tracker,
    order: Sequence[Unit],
    settings: DualPathSettings,
    basis: Any,
    budget: Budget,
    batch_size: int,
    deadline: Callable[[float], bool],
) -> dict[str, Any]:
    records = work.records()
    cap = budget.row_cap
    known_log: dict[str, int] = {}
    chosen = 0
    pending: list[ValidationRow] = []
    swap_pace = tracker.pace.get("rows", 0.0) * SWAP_COST
    tracker.begin("rows", cap if budget.minutes is None else max(cap, len(records)))
    if budget.minutes is not None:
        tracker.total = len(records) + 1

    def flush(batch: list[ValidationRow]) -> None:
        t0 = time.monotonic()
        new = _score_rows(handle, batch, settings, basis)
        work.append(SCORED, [r.to_dict() for r in new])
        for r in new:
            records[r.key] = r
        seconds = time.monotonic() - t0
        work.add_seconds("rows", seconds)
        tracker.measured("rows", seconds, len(batch))
        work.save()
        tracker.total = max(cap, len(records)) if budget.minutes is None else len(records) + batch_size
        agreeing = sum(r.row.relation == AGREEING for r in records.values()) / max(1, len(records))
        tracker.later = FIT_RESERVE_S + tracker.total * agreeing * tracker.pace.get("rows", 0.0) * SWAP_COST
        tracker.report(len(records))
        release_freed()  # the batch's blocks back to the system before the next batch

    stopped = None
    too_long = 0
    for unit in _unit_stream(handle, order, work, batch_size, known_log):
        if chosen >= cap:
            break
        fitting = [r for r in unit.rows if _fits(handle, r, settings)]
        too_long += len(unit.rows) - len(fitting)
        chosen += len(fitting)
        pending += [r for r in fitting if row_key(r) not in records]
        while len(pending) >= batch_size:
            check_cancelled()
            agreeing = sum(r.row.relation == AGREEING for r in records.values() if r.swap is None)
            reserve = FIT_RESERVE_S + agreeing * swap_pace
            if deadline(tracker.pace.get("rows", 0.0) * batch_size + reserve):
                stopped = "the minutes budget" if budget.minutes is not None else "the default's time cap"
                break
            batch, pending = pending[:batch_size], pending[batch_size:]
            flush(batch)
        if stopped:
            break
    if pending and not stopped:
        check_cancelled()
        flush(pending)
    work.state["rows"] = {
        "chosen": chosen,
        "knownness": known_log,
        "too_long": too_long,
        "stopped_by": stopped or "the row budget",
    }
    work.save()
    return work.state["rows"]


def _swap_stage(handle: ModelHandle, work: Work, tracker: Tracker, batch_size: int) -> int:
    records = work.records()
    done = work.swaps()
    todo = [r for r in records.values() if r.row.relation == AGREEING and r.key not in done]
    total = len(todo)
    tracker.begin("swap", total, FIT_RESERVE_S)
    if "swap" not in tracker.pace and "rows" in tracker.pace:
        tracker.pace["swap"] = tracker.pace["rows"] * SWAP_COST
    for start in range(0, total, batch_size):
        check_cancelled()
        part = todo[start : start + batch_size]
        t0 = time.monotonic()
        spans = [observe(r.result, SWAP_LEVEL).span for r in part]
        tests = run_swap_tests(handle, [r.result for r in part], spans, batch_size=batch_size)
        work.append(SWAPS, [{"key": r.key, "swap": t.to_dict()} for r, t in zip(part, tests)])
        seconds = time.monotonic() - t0
        work.add_seconds("swap", seconds)
        tracker.measured("swap", seconds, len(part))
        work.save()
        tracker.report(start + len(part))
    return total


def _save_fitted(handle: ModelHandle, template: str, folder: Path, fitted: Fitted) -> dict[str, dict[str, Any]]:
    """Write every fitted artifact where its lookup finds it; returns ``{artifact: {"path", "status", "note"}}``."""
    out: dict[str, dict[str, Any]] = {}
    shadow = "the bundled file of the embedded model stays in force" if handle.info.is_embedded else ""

    def note(name: str, path: Path | None, status: str, extra: str = "") -> None:
        out[name] = {"path": None if path is None else str(path), "status": status, "note": extra}

    if fitted.tau is not None:
        fitted.tau.save(folder / calibration_store.TAU_FILE)
        note("tau", folder / calibration_store.TAU_FILE, "fitted", shadow)
    if fitted.axes is not None:
        path = atomic_write_json(folder / calibration_store.AXES_FILE, fitted.axes.to_dict())
        note("axes", path, "fitted", shadow)
    if fitted.detectors is not None:
        path = atomic_write_json(folder / calibration_store.DETECTORS_FILE, _clean(fitted.detectors))
        note("detector-thresholds", path, "fitted", shadow)
    if fitted.lookback is not None:
        path = fitted.lookback.save(artifacts.cache_path(LOOKBACK_MODEL, handle, template))
        note("lookback-lens", path, "fitted", shadow)
    if fitted.redeep is not None and fitted.redeep_table is not None:
        fitted.redeep_table.save(artifacts.cache_path(REDEEP_TABLE, handle, template))
        note("redeep-choice", fitted.redeep.save(cache_choice_path(handle, template)), "fitted", shadow)
    if fitted.combined is not None:
        note("combined-detector", fitted.combined.save(combined_path(handle, template)), "fitted", shadow)
    for name, reason in fitted.notes.items():
        key = ARTIFACT_NAMES[name]
        note(key, None, "not fitted", reason)
    return out


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process so far (every thread): a machine's load does not inflate it."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _peak_rss_mb() -> float:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(rss / (1024 * 1024 if sys.platform == "darwin" else 1024), 1)


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
    """Calibrate ``handle``'s model in one step (see the module docstring) and return its calibration card.

    Args:
        budget: a :class:`Budget` or its text (``"240"`` rows, ``"30m"`` minutes); default :data:`DEFAULT_ROWS` rows.
        out: the folder of the run's checkpoints and a copy of the card (default: ``work/`` in the model's
            calibration folder, the card beside it).
        progress: ``progress(done, total, text)``: the stage, its progress and an estimate of the time left.
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
        ValueError: a bad budget or batch size, a rows file without rows, a work folder of another model.
        RunCancelled: the run was cancelled.
    """
    budget = budget if isinstance(budget, Budget) else Budget.parse(budget)
    settings = settings or DualPathSettings()
    settings.validate()
    batch_size = batch_size_for(handle, settings) if batch_size is None else batch_size
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    fix_mmap_threshold()  # see core.model.memory: a long run's peak stays at what it holds
    template = resolve_template(settings.template, handle.tokenizer).key
    folder = calibration_store.claim_folder(handle, template)
    work_folder = Path(out) / "work" if out is not None else folder / calibration_store.WORK
    if restart and work_folder.is_dir():
        shutil.rmtree(work_folder)
    work = Work(work_folder, handle, template)
    path = Path(rows_path) if rows_path is not None else ROWS_CSV
    rows = read_rows(path)
    order = order_units(units_of(rows), seed)
    if not order:
        raise ValueError(f"{path} has no calibration or report rows")
    previous = work.state.get("budget")
    if previous is not None and previous != budget.to_dict():
        work.reopen("rows")  # another budget: score on from the rows kept (a larger one), then fit again
    work.state["budget"] = budget.to_dict()
    started_wall = time.monotonic()
    before = float(work.state.get("elapsed", 0.0))
    cpu_before, cpu_start = float(work.state.get("cpu_seconds", 0.0)), _cpu_seconds()

    def elapsed() -> float:
        return before + time.monotonic() - started_wall

    def over_deadline(needed_s: float) -> bool:
        cap = budget.time_cap
        return cap is not None and elapsed() + needed_s > cap * 60

    tracker = Tracker(progress, work, budget)
    notes: dict[str, str] = dict(work.state.get("notes", {}))
    try:
        with run_control(cancel):
            t0 = time.monotonic()
            basis, note = _crm_stage(handle, template, tracker)
            if not work.done("crm-basis"):
                notes["crm-basis"] = note
                work.state["notes"] = notes
                work.finish("crm-basis", time.monotonic() - t0)
            notes.setdefault("crm-basis", note)
            t0 = time.monotonic()
            note = _radar_stage(handle, tracker)
            if not work.done("radar"):
                notes["radar"] = note
                work.state["notes"] = notes
                work.finish("radar", time.monotonic() - t0)
            notes.setdefault("radar", note)
            work.state["notes"] = notes
            if not work.done("rows"):
                _rows_stage(handle, work, tracker, order, settings, basis, budget, batch_size, over_deadline)
                work.finish("rows", 0.0)
            if not work.done("swap"):
                _swap_stage(handle, work, tracker, batch_size)
                work.finish("swap", 0.0)
            tracker.begin("fit", 1)
            t0 = time.monotonic()
            try:
                ov = ov_copying_scores(handle)
            except ValueError as exc:
                logger.info("no OV copying scores: %s", exc)
                ov = None
            records = list(work.records().values())
            identity = ModelIdentity(
                handle.info.name,
                handle.slug,
                template,
                handle.info.n_layers,
                handle.info.n_heads,
                settings.to_dict(),
                [{"path": _shown(path), "sha256": _sha256(path), "split": CALIBRATION}],
            )
            fitted = fit_all(records, identity, ov)
            saved = _save_fitted(handle, template, folder, fitted)
            work.finish("fit", time.monotonic() - t0)
            tracker.begin("card", 1)
            t0 = time.monotonic()
            figures = held_out(records, fitted, bundled_axes() if handle.info.is_embedded else None)
            work.finish("card", time.monotonic() - t0)
    finally:
        work.state["elapsed"] = round(elapsed(), 1)
        work.state["cpu_seconds"] = round(cpu_before + _cpu_seconds() - cpu_start, 1)
        work.state["peak_rss_mb"] = max(_peak_rss_mb(), float(work.state.get("peak_rss_mb", 0.0)))
        work.save()
    saved = {
        "crm-basis": {
            "path": str(cache_basis_path(handle, template)),
            "status": notes["crm-basis"].split(":")[0],
            "note": notes["crm-basis"],
        },
        "radar": {
            "path": str(feature_cache_path(handle)),
            "status": notes["radar"].split(":")[0],
            "note": notes["radar"],
        },
        **saved,
    }
    card = build_card(
        handle=handle,
        template=template,
        settings=settings.to_dict(),
        budget=budget,
        records=records,
        fitted=fitted,
        figures=figures,
        artifacts=saved,
        state=work.state,
        rows_file={"path": _shown(path), "sha256": _sha256(path)},
        created=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    write_card(card, folder)
    if out is not None:
        write_card(card, Path(out))
    tracker.begin("done", 1)
    return card


def _shown(path: Path) -> str:
    from core.io import REPO_ROOT

    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return str(path)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


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
    from core.engine.estimate import estimate

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
    pace = state.get("pace") or {}
    if isinstance(pace.get("rows"), (int, float)) and pace["rows"] > 0:
        scored = _count_lines(state_path.parent / SCORED)
        left = max(0, rows - scored)
        swap = float(pace.get("swap") or pace["rows"] * SWAP_COST)
        seconds = left * float(pace["rows"]) + (scored + left) * 0.35 * swap + FIT_RESERVE_S
        return seconds if cap is None else min(seconds, cap * 60.0)
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
    try:
        with path.open(encoding="utf-8") as fh:
            return sum(1 for line in fh if line.strip())
    except OSError:
        return 0


__all__ = [
    "DEFAULT_ROWS",
    "Budget",
    "Unit",
    "calibrate_model",
    "estimate_calibration",
    "order_units",
    "read_rows",
    "units_of",
]
