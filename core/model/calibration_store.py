"""Where ``calibrate-model`` keeps a model's own calibration, and the one key that finds it (identity + template).

One folder per (model + revision, resolved prompt template) in the user cache:
``<cache_dir>/calibrated/<slug>/<template>/`` (the slug, :attr:`core.model.handle.ModelHandle.slug`, is the
model's name plus a digest of its source — the hub revision or the GGUF file's sha256 — so another revision or
file gets another folder). It holds the small per-model files that have no other home in the artifact store:

* ``model.json`` — which model, source, slug and template the folder is for (written first, checked by
  :func:`own_folder`);
* ``tau.json`` — RePCS' τ and τ(L) (:class:`core.engine.threshold.Threshold`);
* ``axes.json`` — the headline's axes calibration (:class:`core.engine.axes_calibration.AxesCalibration`);
* ``detectors.json`` — the per-detector thresholds (:mod:`core.detectors.thresholds`);
* ``card.json`` / ``card.txt`` — the calibration card (:mod:`core.evaluation.model_card`);
* ``work/`` — the checkpoints of a run, so a killed run continues where it stopped.

The other artifacts (CRM basis, Lookback Lens classifier, ReDeEP choice, combined detector, RADAR assets) keep the
cache locations of their own :class:`~core.model.artifacts.ArtifactKind`. There is one key and one door: a folder
is found by the model's identity (its slug) and the resolved template (:func:`own_folder`), never by a model's
name alone, and read into one record by :func:`core.engine.calibration_record.record_for` — another file at the
same path, another revision or another template is another folder, so *not calibrated for this model*.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

from core.io import atomic_write_json, cache_dir
from core.model.handle import ModelHandle
from core.model.prompts import answer_ending

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
    record = {"model": handle.info.name, "source": handle.info.source, **identity(handle, template_key)}
    path = folder / MODEL_FILE
    if _read_record(path) != record:
        atomic_write_json(path, record)
    return folder


IDENTITY_KEYS = ("model", "slug", "template", "answers")
"""The fields of ``model.json`` a folder must match exactly (``answers`` absent for a chat template)."""


def identity(handle: ModelHandle, template_key: str) -> dict[str, str]:
    """What a calibration folder and its checkpoints are made for: the model's name, slug and resolved template,
    and how its answers end under that template (:func:`core.model.prompts.answer_ending`, plain templates only)."""
    return _identity(handle.info.name, handle.slug, template_key)


def _identity(name: str, slug: str, template_key: str) -> dict[str, str]:
    ending = answer_ending(template_key)
    return {"model": name, "slug": slug, "template": template_key, **({"answers": ending} if ending else {})}


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


def identity_of(folder: Path) -> dict[str, str] | None:
    """The ``model.json`` of a calibration folder (which model, source, slug and template it was made for), or
    ``None`` when it is missing or unreadable (read once per modification time)."""
    return _read_record(folder / MODEL_FILE)


def own_folder(name: str, slug: str, template_key: str) -> Path | None:
    """The calibration folder of the model with this identity — its ``slug`` (name + a digest of its source:
    :func:`core.io.model_slug`) and the resolved ``template_key`` — when its ``model.json`` says it was made for
    exactly that (name, slug and template, and how answers end under it: a folder calibrated before a plain
    template's answers were cut at the model's own turn is not this model's calibration now), else ``None``. The
    one lookup of a calibration folder: by the model's identity and template, never by its name alone."""
    try:
        folder = model_folder(slug, template_key)
    except ValueError:
        return None
    record = identity_of(folder)
    if record is None:
        return None
    wanted = _identity(name, slug, template_key)
    if {k: record.get(k) for k in IDENTITY_KEYS} != {k: wanted.get(k) for k in IDENTITY_KEYS}:
        logger.info("Ignoring the calibration folder %s: made for %s, not %s", folder, record, wanted)
        return None
    return folder


def work_folder(handle: ModelHandle, template_key: str) -> Path:
    """Where a run's checkpoints go by default (``work/`` in the model's calibration folder)."""
    return folder_for(handle, template_key) / WORK


def model_argument(name: str, source: str = "") -> str:
    """The ``--model`` value that loads the model with this name and source, as ``--help`` documents it: the
    packaged shortcut (``gemma3-270m``), the GGUF file's or the folder's path, the hub id (with ``--revision``), or
    ``embedded``; the name itself when the source says nothing more."""
    from core.model.gguf_files import PACKAGED
    from core.model.loading import EMBEDDED_MODEL, EMBEDDED_NAME

    if name == EMBEDDED_NAME:
        return EMBEDDED_MODEL
    for key, packaged in PACKAGED.items():
        if name == packaged.name:
            return key
    for opening in ("GGUF file ", "local folder "):
        if source.startswith(opening):
            path = source[len(opening) :]
            return path.split(" (", 1)[0] if opening == "GGUF file " else path
    if source.startswith("huggingface hub "):
        spec, _, revision = source[len("huggingface hub ") :].partition("@")
        return f"{spec} --revision {revision}" if revision else spec
    return name


def calibrate_command(name: str, source: str = "") -> str:
    """The one command that calibrates the model with this name and source (:func:`model_argument`)."""
    import shlex

    spec, sep, revision = model_argument(name, source).partition(" --revision ")
    command = f"python -m core calibrate-model --model {shlex.quote(spec)}"
    return command + (f" --revision {shlex.quote(revision)}" if sep else "")


def missing_artifact(what: str, model: ModelHandle | str, template: str | None = None) -> str:
    """The one sentence for a per-model artifact a model lacks: which, and the one step that builds it (with the
    ``--model`` value ``--help`` documents when given the handle, :func:`calibrate_command`)."""
    name, source = (model.info.name, model.info.source) if isinstance(model, ModelHandle) else (model, "")
    where = f" with template {template!r}" if template else ""
    return (
        f"No {what} for {name!r}{where}: build it, with every other per-model artifact, in one step with "
        f"`{calibrate_command(name, source)}` (or “Calibrate this model” on the Dual Path page)."
    )
