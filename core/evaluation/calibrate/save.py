"""The one writer of a calibration's files (:func:`write_file`: JSON, text or arrays, each written atomically), what
it writes where (:func:`files_of`), and the card's list of artifacts (:func:`describe`).

Where each file goes is where its lookup finds it: τ and τ(L), the axes calibration and the per-detector thresholds
in the model's calibration folder (``<cache>/calibrated/<slug>/<template>/{tau,axes,detectors}.json``,
:mod:`core.model.calibration_store`), the card beside them (``card.json``, ``card.txt``) and in ``--out``; the
Lookback Lens classifier, ReDeEP's choice and table and the combined detector in their own caches
(:mod:`core.model.artifacts`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from core.detectors.combined import cache_model_path as combined_path
from core.evaluation.calibrate.checkpoints import clean
from core.evaluation.calibrate.records import Fitted
from core.evaluation.model_card import card_text
from core.io import atomic_write_json, atomic_write_npz, atomic_write_text
from core.methods.lookback.model import LOOKBACK_MODEL
from core.methods.redeep.choice import REDEEP_TABLE, cache_choice_path
from core.model import artifacts, calibration_store
from core.model.handle import ModelHandle

ARTIFACT_NAMES = {
    "tau": "tau",
    "axes": "axes",
    "detectors": "detector-thresholds",
    "lookback": "lookback-lens",
    "redeep": "redeep-choice",
    "combined": "combined-detector",
}
"""A fit's name in :class:`~core.evaluation.calibrate.records.Fitted` → its artifact's name on the card."""
HEADLINE_FITS = ("tau", "axes")
DETECTOR_FITS = ("detectors", "lookback", "redeep", "combined")


class Arrays(dict):
    """Named arrays, written as one compressed NPZ (read back with ``allow_pickle=False``)."""


def write_file(path: Path, content: Any) -> Path:
    """Write ``content`` to ``path`` atomically — a ``str`` as UTF-8 text, :class:`Arrays` as NPZ, anything else as
    strict JSON — and return the path. Every file a calibration writes goes through here."""
    if isinstance(content, str):
        return atomic_write_text(path, content)
    if isinstance(content, Arrays):
        return atomic_write_npz(path, dict(content))
    return atomic_write_json(path, content)


def files_of(
    handle: ModelHandle, template: str, folder: Path, fitted: Fitted, names: Sequence[str]
) -> list[tuple[str, Path, Any]]:
    """``(fit name, path, content)`` of every file of the fits ``names`` that were fitted (ReDeEP: its table, then
    its choice)."""
    out: list[tuple[str, Path, Any]] = []
    for name in names:
        if name == "tau" and fitted.tau is not None:
            out.append((name, folder / calibration_store.TAU_FILE, fitted.tau.to_json()))
        elif name == "axes" and fitted.axes is not None:
            out.append((name, folder / calibration_store.AXES_FILE, fitted.axes.to_dict()))
        elif name == "detectors" and fitted.detectors is not None:
            out.append((name, folder / calibration_store.DETECTORS_FILE, clean(fitted.detectors)))
        elif name == "lookback" and fitted.lookback is not None:
            out.append((name, artifacts.cache_path(LOOKBACK_MODEL, handle, template), fitted.lookback.to_dict()))
        elif name == "redeep" and fitted.redeep is not None and fitted.redeep_table is not None:
            table = fitted.redeep_table
            arrays = Arrays(ecs=table.ecs.astype(np.float32), pks=table.pks.astype(np.float32), labels=table.labels)
            out.append(("redeep-table", artifacts.cache_path(REDEEP_TABLE, handle, template), arrays))
            out.append((name, cache_choice_path(handle, template), fitted.redeep.to_dict()))
        elif name == "combined" and fitted.combined is not None:
            out.append((name, combined_path(handle, template), fitted.combined.to_dict()))
    return out


def save_fitted(
    handle: ModelHandle, template: str, folder: Path, fitted: Fitted, names: Sequence[str]
) -> dict[str, str]:
    """Write the files of the fits ``names``; returns ``{fit name: path}``."""
    written = files_of(handle, template, folder, fitted, names)
    return {name: str(write_file(path, content)) for name, path, content in written}


def describe(
    handle: ModelHandle, fitted: Fitted, paths: dict[str, str], pending: Sequence[str] = ()
) -> dict[str, dict[str, Any]]:
    """The card's entries of the fitted artifacts: ``{artifact: {"path", "status", "note"}}`` — ``fitted`` (where
    written), ``pending`` (a later stage of this run fits it) or ``not fitted`` (why)."""
    shadow = "the bundled file of the embedded model stays in force" if handle.info.is_embedded else ""
    out: dict[str, dict[str, Any]] = {}
    for name, card_name in ARTIFACT_NAMES.items():
        if name in paths:
            out[card_name] = {"path": paths[name], "status": "fitted", "note": shadow}
    for name in pending:
        out[ARTIFACT_NAMES[name]] = {"path": None, "status": "pending", "note": "a later stage of this run fits it"}
    for name, reason in fitted.notes.items():
        if name not in pending:
            out[ARTIFACT_NAMES[name]] = {"path": None, "status": "not fitted", "note": reason}
    return out


def save_card(card: dict[str, Any], folders: Sequence[Path]) -> None:
    """Write ``card.json`` and ``card.txt`` into each of ``folders``."""
    for folder in folders:
        write_file(folder / calibration_store.CARD_FILE, card)
        write_file(folder / calibration_store.CARD_TEXT, card_text(card))
