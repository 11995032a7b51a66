"""One door for "what this model is calibrated with": one record, found by one key.

A :class:`ModelCalibration` holds everything a model's verdicts are calibrated with — RePCS' τ and τ(L), the
headline's axes calibration (with its resolvers), the per-detector thresholds, the paths of the classifier
artifacts (from the card) and the calibration card — with the key that found it: the model's identity (its slug,
:attr:`core.model.handle.ModelHandle.slug`: the name plus a digest of its source — the hub revision, the folder or
the GGUF file's sha256) and the resolved prompt template, ``"<slug>/<template>"`` (:attr:`ModelCalibration.key`).

* :func:`record_for` — the record of a loaded model and a resolved template: resolved once with the handle, where
  τ is resolved (:meth:`core.engine.batch.ScoreRequest.resolved`), and handed to scoring; the result carries its
  key (:attr:`core.engine.result.DualPathResult.calibration_id`) and its headline is decided under its axes;
* :func:`record_of_result` — the record that decided a stored result (by its ``calibration_id``, else by the
  identity its ``model_info`` names): what the page's card, ``run --json``'s ``calibration`` and a re-read headline
  use, so they always come from the same record as the verdict.

Where it comes from (:attr:`ModelCalibration.origin`): the embedded model's bundled files (``assets/thresholds``:
its τ, axes and per-detector thresholds; they stay in force for it, as they always have), else the model's own
folder written by ``calibrate-model`` (:func:`core.model.calibration_store.own_folder`: only a folder whose
``model.json`` names exactly this slug and template), else none — *Not calibrated for this model*. Another file at
the same path (another sha256), another revision or another template is another key, so another (empty) record:
no file is ever found by a model's name alone. Files are read once per modification time (the artifact store's
memo), so a record is cheap to ask for again.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.engine.axes_calibration import AxesCalibration, bundled_axes, cached_axes
from core.engine.threshold import BUNDLED_TAU, EMBEDDED_THRESHOLD, THRESHOLD_DIR, Threshold, check_model
from core.io import EMBEDDED_SLUG, model_slug
from core.model import artifacts, calibration_store
from core.model.handle import ModelHandle
from core.model.loading import EMBEDDED_NAME
from core.model.prompts import resolve_template

if TYPE_CHECKING:
    from core.engine.result import DualPathResult

logger = logging.getLogger(__name__)

BUNDLED = "bundled"
"""The origin of the embedded model's shipped calibration (``assets/thresholds``)."""
CALIBRATE_MODEL = "calibrate-model"
"""The origin of a model's own calibration folder (``python -m core calibrate-model``)."""
NONE = "none"
"""No calibration for this model and template: *Not calibrated for this model*."""
EMBEDDED_TEMPLATE = "chat"
"""The template the embedded model's bundled files are keyed under when no run names one."""


def _read_json(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    return data


def _read_detectors(path: Path) -> dict[str, Any]:
    data = _read_json(path)
    if not isinstance(data.get("detectors"), dict):
        raise ValueError("not a per-detector calibration (no 'detectors' object)")
    return data


DETECTOR_THRESHOLDS = artifacts.ArtifactKind(
    name="detector-thresholds",
    read=_read_detectors,
    bundled=lambda slug, variant: THRESHOLD_DIR / f"detectors-{slug}.json",
    bundled_embedded_only=False,
    cache=lambda slug, variant: Path(calibration_store.STORE, slug, variant or "-", calibration_store.DETECTORS_FILE),
    fresh=lambda data, handle, variant: None if data.get("model") == handle.info.name else "another model's",
)
"""The per-detector calibration: bundled (``scripts/calibrate_detectors.py``) by the model's slug, else the model's
own from ``calibrate-model`` in its calibration folder (per resolved template)."""
CARD = artifacts.ArtifactKind(name="calibration-card", read=_read_json)
"""A calibration card (``card.json``), read once per modification time."""


COPYING_HEADS = THRESHOLD_DIR / "copying-embedded.json"
"""The embedded model's copying heads chosen on calibration rows (``scripts/agreement_signals.py``)."""
COPYING_FILE = "copying.json"
"""The same choice in a model's own calibration folder, where one was made."""


@dataclass(frozen=True)
class ChosenHeads:
    """The heads that copy the answer, chosen on a model's calibration rows (issue 42 D): the ``heads`` ``(layer,
    head)`` whose attention on the span's occurrence in the context best separated *read* from *recalled* agreeing
    rows (labeled by their swap tests), their count by grouped cross-validation (``cv_auc``), and how many rows the
    choice was made on (``rows``, ``recalled`` of them). The headline does not read them (they added nothing in
    cross-validation); the Attention page marks them."""

    heads: tuple[tuple[int, int], ...]
    cv_auc: float
    rows: int
    recalled: int
    chosen_on: str

    def fits(self, n_layers: int, n_heads: int) -> bool:
        """Every head exists in a model of ``n_layers`` × ``n_heads``."""
        return all(0 <= layer < n_layers and 0 <= head < n_heads for layer, head in self.heads)

    def to_dict(self, model: str) -> dict[str, Any]:
        return {"model": model, "heads": [list(h) for h in self.heads], "cv_auc": self.cv_auc, "rows": self.rows,
                "recalled": self.recalled, "chosen_on": self.chosen_on}  # fmt: skip


def _read_chosen(path: Path) -> tuple[str, ChosenHeads]:
    data = _read_json(path)
    heads = data.get("heads")
    if (
        not isinstance(heads, list)
        or not heads
        or not all(isinstance(h, list) and len(h) == 2 and all(isinstance(i, int) for i in h) for h in heads)
    ):
        raise ValueError("no list of [layer, head] pairs under 'heads'")
    chosen = ChosenHeads(tuple((int(a), int(b)) for a, b in heads), float(data["cv_auc"]), int(data["rows"]),
                         int(data["recalled"]), str(data["chosen_on"]))  # fmt: skip
    return str(data.get("model", "")), chosen


CHOSEN_HEADS = artifacts.ArtifactKind(name="copying-heads", read=_read_chosen)
"""The copying heads chosen on calibration rows, read once per modification time."""


def _chosen(name: str, path: Path) -> ChosenHeads | None:
    if not path.is_file():
        return None
    try:
        model, chosen = artifacts.read(CHOSEN_HEADS, path)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        logger.warning("Ignoring the copying heads %s: %s", path, exc)
        return None
    return chosen if model == name else None


def calibration_key(slug: str, template: str) -> str:
    """The one key of a model's calibration: ``"<slug>/<template>"``."""
    return f"{slug}/{template}"


@dataclass(frozen=True)
class ModelCalibration:
    """What one model (by its identity) with one resolved template is calibrated with.

    Attributes:
        model: the model's name; slug: its identity (name + a digest of its source); template: the resolved key.
        origin: :data:`BUNDLED`, :data:`CALIBRATE_MODEL` or :data:`NONE`.
        folder: the calibration folder it was read from (``None`` for the bundled files or none).
        tau: RePCS' τ (and τ(L)) of this record, ``None`` without one; tau_path: its file.
        axes: the headline's axes calibration (with its joint and agreement resolvers), ``None`` without one.
        detectors: the per-detector thresholds document (:mod:`core.detectors.thresholds`), ``None`` without one.
        card: the calibration card (``card.json``), ``None`` without one.
        artifacts: the paths of the classifier artifacts the card lists (name → path).
        source: the model's source when the asker knew it (for the command that calibrates it).
        copying: the heads that copy the answer, chosen on its calibration rows (:class:`ChosenHeads`), ``None``
            where none were chosen.
    """

    model: str
    slug: str
    template: str
    origin: str = NONE
    folder: Path | None = None
    tau: Threshold | None = field(default=None, compare=False)
    tau_path: Path | None = None
    axes: AxesCalibration | None = field(default=None, compare=False)
    detectors: dict[str, Any] | None = field(default=None, compare=False)
    card: dict[str, Any] | None = field(default=None, compare=False)
    artifacts: dict[str, str] = field(default_factory=dict, compare=False)
    source: str = field(default="", compare=False)
    copying: ChosenHeads | None = field(default=None, compare=False)

    @property
    def key(self) -> str:
        """``"<slug>/<template>"``: the one key this record was found by (a result's ``calibration_id``)."""
        return calibration_key(self.slug, self.template)

    @property
    def calibrated(self) -> bool:
        """Whether the headline has its axes (a ``calibrate-model`` run too small to fit them is not)."""
        return self.axes is not None


def template_key(handle: ModelHandle, template: str) -> str:
    """The resolved template key a run of ``handle`` with the template setting ``template`` uses (``auto`` →
    ``chat`` or ``A``); an unknown key stays itself (the run refuses it)."""
    try:
        return resolve_template(template, handle.tokenizer).key
    except ValueError:
        return template


def record_for(handle: ModelHandle, template: str) -> ModelCalibration:
    """The calibration record of ``handle``'s model with the resolved ``template`` (``"auto"`` is resolved)."""
    return record_of(handle.info.name, handle.slug, template_key(handle, template), handle.info.source)


def record_of_result(result: DualPathResult) -> ModelCalibration:
    """The record that decided ``result``: by its ``calibration_id`` when it carries one, else by the identity its
    ``model_info`` names (name + source) and its resolved template."""
    name = result.model
    source = str((result.model_info or {}).get("source", ""))
    key = getattr(result, "calibration_id", None)
    if isinstance(key, str) and key.count("/") == 1:
        slug, template = key.split("/")
        return record_of(name, slug, template, source)
    return record_of(name, model_slug(name, source, embedded=name == EMBEDDED_NAME), result.template, source)


def embedded_record(template: str = EMBEDDED_TEMPLATE) -> ModelCalibration:
    """The embedded model's record (its bundled files)."""
    return record_of(EMBEDDED_NAME, EMBEDDED_SLUG, template)


def record_of(name: str, slug: str, template: str, source: str = "") -> ModelCalibration:
    """The record of the model named ``name`` with identity ``slug`` and resolved ``template``: the bundled files
    for the embedded model, else its own folder (exactly this slug and template), else an empty record."""
    if slug == EMBEDDED_SLUG and name == EMBEDDED_NAME:
        bundled = _bundled(name, slug, template)
        if bundled is not None:
            return bundled
    folder = calibration_store.own_folder(name, slug, template)
    if folder is None:
        detectors = _detectors(name, slug, template, None)
        return ModelCalibration(name, slug, template, detectors=detectors, source=source)
    tau_path = folder / calibration_store.TAU_FILE
    card = _card(name, folder)
    return ModelCalibration(
        model=name,
        slug=slug,
        template=template,
        origin=CALIBRATE_MODEL,
        folder=folder,
        tau=_tau(name, tau_path),
        tau_path=tau_path if tau_path.is_file() else None,
        axes=_axes(name, folder / calibration_store.AXES_FILE),
        detectors=_detectors(name, slug, template, folder),
        card=card,
        artifacts=_artifact_paths(card),
        source=source,
        copying=_chosen(name, folder / COPYING_FILE),
    )


def _bundled(name: str, slug: str, template: str) -> ModelCalibration | None:
    axes = bundled_axes()
    tau = _tau(name, EMBEDDED_THRESHOLD)
    if tau is None and (axes is None or axes.model != name):
        return None
    return ModelCalibration(
        model=name,
        slug=slug,
        template=template,
        origin=BUNDLED,
        tau=tau,
        tau_path=EMBEDDED_THRESHOLD if tau is not None else None,
        axes=axes if axes is not None and axes.model == name else None,
        detectors=_detectors(name, slug, template, None),
        copying=_chosen(name, COPYING_HEADS),
    )


def _tau(name: str, path: Path) -> Threshold | None:
    if not path.is_file():
        return None
    try:
        th = artifacts.read(BUNDLED_TAU, path)
        check_model(th, name)
    except (OSError, ValueError) as exc:
        logger.warning("Ignoring the τ %s: %s", path, exc)
        return None
    return th


def _axes(name: str, path: Path) -> AxesCalibration | None:
    try:
        found = cached_axes(path)
    except (OSError, ValueError) as exc:
        logger.warning("Ignoring the axes calibration %s: %s", path, exc)
        return None
    return found if found is not None and found.model == name else None


def _detectors(name: str, slug: str, template: str, folder: Path | None) -> dict[str, Any] | None:
    paths = [DETECTOR_THRESHOLDS.bundled(slug, template)]  # type: ignore[misc]
    if folder is not None:
        paths.append(folder / calibration_store.DETECTORS_FILE)
    for path in paths:
        if not path.is_file():
            continue
        try:
            data = artifacts.read(DETECTOR_THRESHOLDS, path)
        except (OSError, ValueError) as exc:
            logger.warning("Ignoring the per-detector calibration %s: %s", path, exc)
            continue
        if data.get("model") == name:
            return data
    return None


def _card(name: str, folder: Path) -> dict[str, Any] | None:
    path = folder / calibration_store.CARD_FILE
    if not path.is_file():
        return None
    try:
        card = artifacts.read(CARD, path)
    except (OSError, ValueError) as exc:
        logger.warning("Ignoring the unreadable calibration card %s: %s", path, exc)
        return None
    return card if card.get("model") == name else None


def _artifact_paths(card: dict[str, Any] | None) -> dict[str, str]:
    listed = (card or {}).get("artifacts")
    if isinstance(listed, dict):
        items = listed.items()
    elif isinstance(listed, list):
        items = ((a.get("name"), a) for a in listed if isinstance(a, dict))
    else:
        return {}
    out = {}
    for name, entry in items:
        path = entry.get("path") if isinstance(entry, dict) else None
        if isinstance(name, str) and isinstance(path, str):
            out[name] = path
    return out
