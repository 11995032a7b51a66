"""Fake ``calibrate-model`` folders for the tiny test model (no calibration is run): the bundled τ(L) and axes
calibration of the embedded model, re-labeled for the tiny model and written where ``calibrate-model`` writes them
(``<cache>/calibrated/<slug>/<template>/``, :mod:`core.model.calibration_store`), and handles of "the same model"
from another source (another GGUF file at the same path, another hub revision) sharing the tiny model's weights."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from core.engine.axes_calibration import AXES_FILE
from core.engine.threshold import EMBEDDED_THRESHOLD, Threshold
from core.io import atomic_write_json
from core.model import calibration_store
from core.model.handle import ModelHandle
from core.model.loading import handle_from_model

FAKE_AXES_SOURCE = "python -m core calibrate-model (a fake folder written by tests/calibration_fakes.py)"
GGUF_PATH = "/models/model.gguf"


def gguf_source(sha: str, path: str = GGUF_PATH) -> str:
    """The source of a GGUF file at ``path`` with this sha256 (as :mod:`core.model.loading` writes it)."""
    return f"GGUF file {path} (llama, F32; sha256 {sha})"


def write_fake_calibration(handle: ModelHandle, template: str, *, axes: bool = True) -> Path:
    """A calibration folder for ``handle``'s model and ``template`` holding a τ (and, with ``axes``, an axes
    calibration) made for it; returns the folder. Needs ``READ_OR_RECALL_CACHE`` set to a test folder."""
    folder = calibration_store.claim_folder(handle, template)
    replace(Threshold.load(EMBEDDED_THRESHOLD), model=handle.info.name).save(folder / calibration_store.TAU_FILE)
    if axes:
        data = json.loads(Path(AXES_FILE).read_text(encoding="utf-8"))
        data.update(model=handle.info.name, source=FAKE_AXES_SOURCE)
        atomic_write_json(folder / calibration_store.AXES_FILE, data)
    return folder


def same_model_from(handle: ModelHandle, source: str, name: str | None = None) -> ModelHandle:
    """A handle of ``handle``'s weights under the same name (or ``name``) from another ``source``: another slug."""
    return handle_from_model(handle.model, handle.tokenizer, name=name or handle.info.name, source=source)
