"""The detector registry: every method that scores a prompt for "memorised vs grounded".

A detector is one registered function ``score(inp) -> float`` plus the direction of its score; adding a
detector adds a column to ``python -m core evaluate`` and a curve to the Evaluate page.

``inp`` is a :class:`DetectorInput`: the shared handle, the :class:`DualPathResult` of the run (so cheap
detectors need no extra model call) and a per-row ``cache`` dict where expensive detectors can keep work
they share (e.g. one instrumented forward pass used by several CRM features).

Modules that define detectors call :func:`register` at import time; :func:`available` imports the known
detector modules (those that exist in this checkout) and returns the registry.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.engine.dual_path import DualPathSettings
from core.model.loading import ModelHandle
from core.engine.result import DualPathResult

logger = logging.getLogger(__name__)

MEMORIZED_HIGH = "memorized"
GROUNDED_HIGH = "grounded"

# Modules that register detectors when imported, in display order. Missing modules are skipped.
DETECTOR_MODULES = (
    "core.detectors.repcs",
    "core.methods.crm.legacy",
    "core.methods.selfcritique",
    "core.methods.sma.legacy",
    "core.methods.radar.legacy",
    "core.methods.baselines",
    "core.detectors.fitted",
)


@dataclass
class DetectorInput:
    """What a detector sees for one row."""

    handle: ModelHandle
    result: DualPathResult
    settings: DualPathSettings
    cache: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Detector:
    """A registered detector.

    Attributes:
        name: short key used in JSON (``detectors.<name>``) and CSV columns.
        label: human label for tables and legends.
        higher_means: ``"memorized"`` if a higher raw score means more likely memorised, else ``"grounded"``.
        score: ``score(inp) -> float`` (raw score, in the method's own units).
        cost: ``"free"`` (from the result alone), ``"forward"`` (extra forward passes), ``"generate"``
            (extra generations) or ``"heavy"`` (many generations); the UI warns before heavy ones.
        source: the paper / section it implements.
        needs_fit: the score needs a model fitted on other rows (then it must be cross-validated).
        features: for ``needs_fit`` detectors, ``features(inp) -> 1-D float array`` per row; evaluation fits
            the model on the other folds' features and labels (stratified 5-fold ``cross_val_predict``, seed
            42: see :mod:`core.detectors_fitted`), so no row is scored by a model trained on it. ``score`` is
            then only used outside evaluation (it may raise). A ``needs_fit`` detector without ``features``
            (fitted once on its own bundled data) is scored by ``score`` like any other.
    """

    name: str
    label: str
    higher_means: str
    score: Callable[[DetectorInput], float]
    cost: str = "free"
    source: str = ""
    needs_fit: bool = False
    features: Callable[[DetectorInput], np.ndarray] | None = None

    def oriented(self, value: float) -> float:
        """The score oriented so that higher = more likely memorised (positive class)."""
        return float(value) if self.higher_means == MEMORIZED_HIGH else -float(value)


REGISTRY: dict[str, Detector] = {}


def register(detector: Detector) -> Detector:
    """Add a detector to the registry (re-registering the same name replaces it)."""
    if detector.higher_means not in (MEMORIZED_HIGH, GROUNDED_HIGH):
        raise ValueError(f"higher_means must be 'memorized' or 'grounded', got {detector.higher_means!r}")
    REGISTRY[detector.name] = detector
    return detector


def available() -> dict[str, Detector]:
    """Import the detector modules present in this checkout and return the registry."""
    for module in DETECTOR_MODULES:
        if importlib.util.find_spec(module) is not None:
            importlib.import_module(module)
    return dict(REGISTRY)
