"""A calibration's work folder: its checkpoints, read back with every damage named, and its lock.

The folder (``work/`` in the model's calibration folder, or ``--out``/work) holds ``state.json`` (stages done,
measured paces, elapsed time), ``known_answers.json`` (knownness answers), ``scored.jsonl``, ``swap.jsonl`` and
``crm.jsonl`` (one JSON line per row, appended after each batch; the last: CRM scores read after the rows, once the
basis exists), and ``.lock``: one run holds it (:func:`hold_lock`, ``flock``, which
the system releases when the process ends, however it ends), so a second run of the same folder is refused instead
of scoring every row again.

Damage is named, file by file (:class:`DamagedCheckpoint`, a ``ValueError``): a state that is not the run's JSON
object, or a checkpoint that is not a regular file (a named pipe would hang the run), cannot be repaired and the
message says ``--restart``; a line of a ``.jsonl`` checkpoint that is not a row's record (a torn last line
of a killed run, or anything else) is skipped, the file is rewritten without it, and its row is scored (or
swap-tested, or its CRM scores read) again — :attr:`Work.notices` says how many lines of which file.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import stat
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from core.engine.swap import SwapTest
from core.evaluation.calibrate.records import RowRecord
from core.io import atomic_write_json, atomic_write_text
from core.model import calibration_store
from core.model.handle import ModelHandle

logger = logging.getLogger(__name__)

STATE = "state.json"
SCORED = "scored.jsonl"
SWAPS = "swap.jsonl"
KNOWN = "known_answers.json"
CRM_SCORES = "crm.jsonl"
PKS_SCORES = "pks.jsonl"
LOCK = ".lock"
CHECKPOINTS = (STATE, SCORED, SWAPS, KNOWN, CRM_SCORES, PKS_SCORES)
RESTART = "run the same command again with --restart to start over (what was scored is lost)"
STATE_FIELDS: dict[str, tuple[type, ...]] = {
    "identity": (dict,),
    "done": (list,),
    "pace": (dict,),
    "elapsed": (int, float),
    "cpu_seconds": (int, float),
    "peak_rss_mb": (int, float),
    "seconds": (dict,),
    "notes": (dict,),
    "budget": (dict,),
    "rows": (dict,),
}
"""The fields of ``state.json`` and the JSON types each may hold."""
_PARSE_ERRORS = (KeyError, TypeError, ValueError, AttributeError, IndexError)
_AGAIN = {
    "rows": "their rows are scored",
    "swap": "those swap tests are run",
    "crm-basis": "their CRM scores are read",
    "redeep-pks": "their PKS is computed",
}
_LATE = ("crm-basis", "redeep-pks")
"""Stages that always compute what is missing from their checkpoint: a damaged line reopens nothing."""


class DamagedCheckpoint(ValueError):
    """A checkpoint of the work folder cannot be used; the message names the file, what is wrong and what to do."""


class FolderInUse(ValueError):
    """Another calibration holds the work folder's lock."""


def clean(value: Any) -> Any:
    """``value`` with NaN / ±inf floats replaced by ``None`` (strict JSON)."""
    if isinstance(value, float):
        return value if np.isfinite(value) else None
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value


@contextmanager
def hold_lock(folder: Path) -> Iterator[None]:
    """Hold ``folder``'s lock (created with the folder) for the block; released at its end or when the process
    dies.

    Raises:
        FolderInUse: another calibration holds it; the message names the folder and that process.
    """
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK
    refuse_special(path, "the lock file")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "?"
            raise FolderInUse(
                f"{folder} is in use by another calibration (process {holder}) of this work folder: wait for it to "
                "end, or give this one another --out folder"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode("ascii"), 0)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def empty_folder(folder: Path) -> None:
    """Remove everything in ``folder`` but its lock (``--restart``, with the lock held)."""
    for entry in folder.iterdir():
        if entry.name == LOCK:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def refuse_special(path: Path, what: str = "a checkpoint") -> None:
    """Refuse a ``path`` that exists but is no regular file (a named pipe would block the run forever)."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return
    if stat.S_ISREG(mode):
        return
    kind = "a named pipe" if stat.S_ISFIFO(mode) else "a folder" if stat.S_ISDIR(mode) else "not a regular file"
    raise DamagedCheckpoint(f"{path} ({what}) is {kind}: remove it, or {RESTART}")


def _read_state(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    text = path.read_text(encoding="utf-8")
    try:
        state = json.loads(text)
    except ValueError as exc:
        what = "it is empty" if not text.strip() else f"not JSON: {exc}"
        raise DamagedCheckpoint(f"{path} (the run's state) is damaged ({what}); {RESTART}") from None
    if not isinstance(state, dict):
        raise DamagedCheckpoint(
            f"{path} (the run's state) holds a JSON {type(state).__name__}, not the run's state object; {RESTART}"
        )
    for key, types in STATE_FIELDS.items():
        if (key in state and not isinstance(state[key], types)) or isinstance(state.get(key), bool):
            raise DamagedCheckpoint(f"{path} (the run's state) has a damaged {key!r}: {state[key]!r:.60}; {RESTART}")
    if not all(isinstance(s, str) for s in state.get("done", [])):
        raise DamagedCheckpoint(f"{path} (the run's state) has a damaged 'done': {state['done']!r:.60}; {RESTART}")
    return state


class Work:
    """A run's checkpoints (see the module docstring), checked when opened.

    Attributes:
        notices: what was wrong with the checkpoints and what was done about it (lines skipped, stages reopened).
        reopen_from: the earliest stage whose checkpoint lost lines or rows (``"rows"`` or ``"swap"``), else
            ``None``: the run scores them again.
    """

    def __init__(self, folder: Path, handle: ModelHandle, template: str) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        for name in CHECKPOINTS:
            refuse_special(folder / name)
        state = _read_state(folder / STATE)
        ident = calibration_store.identity(handle, template)
        if state and state.get("identity") != ident:
            raise ValueError(
                f"{folder} holds the checkpoints of another calibration ({state.get('identity')}, not {ident}); "
                "choose another --out folder or start over with --restart"
            )
        self.state: dict[str, Any] = state or {"identity": ident, "done": [], "pace": {}, "elapsed": 0.0}
        self.state.setdefault("done", [])
        self.notices: list[str] = []
        self.reopen_from: str | None = None
        self._verify()

    def _verify(self) -> None:
        """Skip the damaged lines of ``scored.jsonl`` / ``swap.jsonl`` (rewriting each without them) and reopen the
        stage that wrote them; a state whose rows stage is done over no scored row reopens it too."""
        checked = (
            (SCORED, "rows", _parse_record),
            (SWAPS, "swap", _parse_swap),
            (CRM_SCORES, "crm-basis", _parse_crm),
            (PKS_SCORES, "redeep-pks", _parse_pks),
        )
        for name, stage, parse in checked:
            good, bad = _read_lines(self.folder / name, parse)
            if bad:
                atomic_write_text(self.folder / name, "".join(line + "\n" for line, _ in good))
                why = "; ".join(f"line {n}: {reason}" for n, reason in bad[:3]) + (" …" if len(bad) > 3 else "")
                self._notice(
                    f"{self.folder / name}: skipped {len(bad)} damaged line{'s' * (len(bad) != 1)} ({why}); "
                    f"{_AGAIN[stage]} again",
                    stage,
                )
        if self.done("rows") and not self.records():
            self._notice(
                f"{self.folder / STATE} says the rows were scored, but {self.folder / SCORED} holds no scored row: "
                "scoring them again",
                "rows",
            )

    def _notice(self, text: str, stage: str) -> None:
        logger.warning("%s", text)
        self.notices.append(text)
        if stage in _LATE:
            return  # a late stage always reads what is missing again
        if self.reopen_from is None or stage == "rows":
            self.reopen_from = stage

    def save(self) -> None:
        atomic_write_json(self.folder / STATE, clean(self.state))

    def done(self, stage: str) -> bool:
        return stage in self.state["done"]

    def finish(self, stage: str, seconds: float) -> None:
        if stage not in self.state["done"]:
            self.state["done"].append(stage)
        self.add_seconds(stage, seconds)
        self.save()

    def reopen(self, stages: Sequence[str]) -> None:
        """Mark ``stages`` as not done; what they stored is kept."""
        self.state["done"] = [s for s in self.state["done"] if s not in set(stages)]
        self.save()

    def add_seconds(self, stage: str, seconds: float) -> None:
        self.state.setdefault("seconds", {})[stage] = round(self.state.get("seconds", {}).get(stage, 0) + seconds, 1)

    def swaps(self) -> dict[str, SwapTest]:
        return dict(item for _, item in _read_lines(self.folder / SWAPS, _parse_swap)[0])

    def crm_scores(self) -> dict[str, dict[str, Any]]:
        """The CRM scores read later for rows scored before the CRM basis existed (``crm.jsonl``), by row key."""
        return {entry["key"]: entry for _, entry in _read_lines(self.folder / CRM_SCORES, _parse_crm)[0]}

    def pks_scores(self) -> dict[str, dict[str, Any]]:
        """ReDeEP's every-layer PKS computed after the rows were scored (``pks.jsonl``), by row key."""
        return {entry["key"]: entry for _, entry in _read_lines(self.folder / PKS_SCORES, _parse_pks)[0]}

    def records(self) -> dict[str, RowRecord]:
        """Every scored row with its swap test, and the CRM scores and PKS computed for it later."""
        swaps, late, pks = self.swaps(), self.crm_scores(), self.pks_scores()
        out: dict[str, RowRecord] = {}
        for _, record in _read_lines(self.folder / SCORED, _parse_record)[0]:
            record.swap = swaps.get(record.key)
            if record.key in late:
                merge_crm(record, late[record.key])
            if record.key in pks:
                record.pks = pks[record.key]["pks"]
                if pks[record.key]["error"]:
                    record.errors["redeep_pks"] = pks[record.key]["error"]
            out[record.key] = record
        return out

    def count(self, name: str) -> int:
        """The usable lines of the JSONL checkpoint ``name``."""
        parse = _parse_record if name == SCORED else _parse_swap
        return len(_read_lines(self.folder / name, parse)[0])

    def append(self, name: str, items: Sequence[dict[str, Any]]) -> None:
        with (self.folder / name).open("a", encoding="utf-8") as fh:
            for item in items:
                fh.write(json.dumps(clean(item), ensure_ascii=False, allow_nan=False) + "\n")
            fh.flush()


def _parse_record(data: Any) -> RowRecord:
    if not isinstance(data.get("key"), str):
        raise ValueError("no row key")
    return RowRecord.from_dict(data)


def _parse_crm(data: Any) -> dict[str, Any]:
    if not isinstance(data.get("key"), str):
        raise ValueError("no row key")
    for part in ("scores", "combined", "errors"):
        if not isinstance(data.get(part), dict):
            raise ValueError(f"no {part!r} object")
    return data


def merge_crm(record: RowRecord, entry: dict[str, Any]) -> None:
    """A row's CRM scores read after it was scored, into ``record`` (the missing-basis errors replaced)."""
    for name in entry["scores"]:
        record.errors.pop(name, None)
    for name in entry["combined"]:
        record.errors.pop(f"combined:{name}", None)
    record.scores.update(entry["scores"])
    record.combined.update(entry["combined"])
    record.errors.update(entry["errors"])


def _parse_pks(data: Any) -> dict[str, Any]:
    if not isinstance(data.get("key"), str):
        raise ValueError("no row key")
    pks, error = data.get("pks"), data.get("error")
    if pks is not None and not (isinstance(pks, list) and all(isinstance(v, int | float) for v in pks)):
        raise ValueError("'pks' is not a list of numbers")
    if (pks is None) == (error is None) or not (error is None or isinstance(error, str)):
        raise ValueError("a PKS line holds either 'pks' or an 'error' string")
    return data


def _parse_swap(data: Any) -> tuple[str, SwapTest]:
    if not isinstance(data.get("key"), str):
        raise ValueError("no row key")
    return data["key"], SwapTest.from_dict(data["swap"])


def _read_lines(path: Path, parse: Callable[[Any], Any]) -> tuple[list[tuple[str, Any]], list[tuple[int, str]]]:
    """The lines of a JSONL checkpoint: ``(good, bad)`` — ``(raw line, parsed)`` of each usable line, and
    ``(line number, why)`` of each that is not (blank lines are neither)."""
    good: list[tuple[str, Any]] = []
    bad: list[tuple[int, str]] = []
    if not path.exists():
        return good, bad
    refuse_special(path)
    with path.open(encoding="utf-8", errors="replace") as fh:
        for n, line in enumerate(fh, start=1):
            text = line.strip()
            if not text:
                continue
            try:
                data = json.loads(text)
                if not isinstance(data, dict):
                    raise TypeError(f"a JSON {type(data).__name__}, not a row's object")
                good.append((text, parse(data)))
            except ValueError as exc:
                torn = not line.endswith("\n")
                bad.append((n, "torn (a run killed while writing it)" if torn else f"{type(exc).__name__}: {exc}"))
            except _PARSE_ERRORS as exc:
                bad.append((n, f"{type(exc).__name__}: {exc}"))
    return good, bad
