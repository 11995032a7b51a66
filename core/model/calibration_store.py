"""Where ``calibrate-model`` keeps a model's own calibration, and how a lookup by the model's name finds it.

One folder per (model + revision, resolved prompt template) in the user cache:
``<cache_dir>/calibrated/<slug>/<template>/`` (the slug, :attr:`core.model.handle.ModelHandle.slug`, is the
model's name plus a digest of its source — the hub revision or the GGUF file's sha256 — so another revision or
file gets another folder). It holds the small per-model files that have no other home in the artifact store:

* ``model.json`` — which model and template the folder is for (written first, read by :func:`files_named`);
* ``tau.json`` — RePCS' τ and τ(L) (:class:`core.engine.threshold.Threshold`);
* ``axes.json`` — the headline's axes calibration (:class:`core.engine.axes_calibration.AxesCalibration`);
* ``detectors.json`` — the per-detector thresholds (:mod:`core.detectors.thresholds`);
* ``card.json`` / ``card.txt`` — the calibration card (:mod:`core.evaluation.model_card`);
* ``work/`` — the checkpoints of a run, so a killed run continues where it stopped.

The other artifacts (CRM basis, Lookback Lens classifier, ReDeEP choice, combined detector, RADAR assets) keep the
cache locations of their own :class:`~core.model.artifacts.ArtifactKind`. Lookups that know only a model's name
(the τ resolver, :func:`core.engine.axes_calibration.axes_for`) go through :func:`files_named`, which reads each
folder's ``model.json`` — newest calibration first.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

from core.io import atomic_write_json, cache_dir
from core.model.handle import ModelHandle

logger = logging.getLogger(__name__)

STORE = "calibrated"
MODEL_FILE = "model.json"
TAU_FILE = "tau.json"
AXES_FILE = "axes.json"
DETECTORS_FILE = "detectors.json"
CARD_FILE = "card.json"
CARD_TEXT = "card.txt"
WORK = "work"

_MEMO: dict[str, tuple[float, dict[str, str]]] = {}
_LOCK = threading.Lock()


def store_root() -> Path:
    """``<cache_dir>/calibrated``: every model's calibration folder lives under it."""
    return cache_dir() / STORE


def model_folder(slug: str, template_key: str) -> Path:
    """The calibration folder of one model (by its slug) and resolved template."""
    if not slug or "/" in slug or not template_key or "/" in template_key:
        raise ValueError(f"a calibration folder needs a slug and a template key, got {slug!r} / {template_key!r}")
    return store_root() / slug / template_key


def folder_for(handle: ModelHandle, template_key: str) -> Path:
    """The calibration folder of ``handle``'s model and the resolved ``template_key``."""
    return model_folder(handle.slug, template_key)


def claim_folder(handle: ModelHandle, template_key: str) -> Path:
    """Create the folder of ``handle``'s model and template and write its ``model.json`` (name, source, slug,
    template); returns the folder."""
    folder = folder_for(handle, template_key)
    record = {"model": handle.info.name, "source": handle.info.source, "slug": handle.slug, "template": template_key}
    path = folder / MODEL_FILE
    if _read_record(path) != record:
        atomic_write_json(path, record)
    return folder


def _read_record(path: Path) -> dict[str, str] | None:
    try:
        mtime = path.stat().st_mtime
    except OSError:
        return None
    with _LOCK:
        cached = _MEMO.get(str(path))
        if cached is not None and cached[0] == mtime:
            return cached[1]
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        logger.warning("Ignoring the unreadable calibration record %s: %s", path, exc)
        return None
    if not isinstance(data, dict) or not isinstance(data.get("model"), str):
        return None
    record = {k: str(v) for k, v in data.items()}
    with _LOCK:
        _MEMO[str(path)] = (mtime, record)
    return record


def files_named(model: str, file: str, template: str | None = None, source: str | None = None) -> list[Path]:
    """Every stored ``file`` of a calibration folder made for the model named ``model`` (and ``template`` /
    ``source`` when given), newest first. Nothing is read but the folders' ``model.json``."""
    root = store_root()
    if not root.is_dir():
        return []
    found: list[tuple[float, Path]] = []
    for record_path in root.glob(f"*/*/{MODEL_FILE}"):
        record = _read_record(record_path)
        if record is None or record.get("model") != model:
            continue
        if template is not None and record.get("template") != template:
            continue
        if source is not None and record.get("source") != source:
            continue
        path = record_path.parent / file
        try:
            found.append((path.stat().st_mtime, path))
        except OSError:
            continue
    return [p for _, p in sorted(found, key=lambda t: -t[0])]


def work_folder(handle: ModelHandle, template_key: str) -> Path:
    """Where a run's checkpoints go by default (``work/`` in the model's calibration folder)."""
    return folder_for(handle, template_key) / WORK


def missing_artifact(what: str, model: str, template: str | None = None) -> str:
    """The one sentence for a per-model artifact a model lacks: which, and the one step that builds it."""
    where = f" with template {template!r}" if template else ""
    return (
        f"No {what} for {model!r}{where}: build it, with every other per-model artifact, in one step with "
        f"`python -m core calibrate-model --model {model!r}` (or “Calibrate this model” on the Dual Path page)."
    )
