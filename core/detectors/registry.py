"""The detector registry: every method that scores a prompt for "memorized vs grounded", one way in.

A detector is a :class:`Detector`: a function ``score(inp) -> float`` plus the direction of its score; adding
one adds a column to ``python -m core evaluate`` and a curve to the Evaluate page. Each family of detectors is
one module in :mod:`core.detectors` that calls :func:`register` (or :func:`register_family` for detectors
named by a parameter, e.g. ``min_k_<k>``) at import; :mod:`core.detectors.catalog` imports every family, and
:func:`available` / :func:`get` / :func:`resolve` are how the rest of the project finds them.

``inp`` is a :class:`DetectorInput`: the shared handle, the :class:`DualPathResult` of the run (so cheap
detectors need no extra model call) and a per-row ``cache`` dict whose shared entries are named in
:mod:`core.detectors.keys`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.engine import DualPathResult, DualPathSettings
from core.engine.verdict import GROUNDED, MEMORIZED
from core.model.handle import ModelHandle

logger = logging.getLogger(__name__)

MEMORIZED_HIGH = MEMORIZED
"""``higher_means`` of a score whose higher values point to the memorized class (the class name itself)."""
GROUNDED_HIGH = GROUNDED
"""``higher_means`` of a score whose higher values point to the grounded class."""

CONTEXT_RELIANCE = "context_reliance"
PARAMETRIC_KNOWLEDGE = "parametric_knowledge"
CONTEXT_FAMILIARITY = "context_familiarity"
RECALL_VS_REASONING = "recall_vs_reasoning"
SOURCE_ATTRIBUTION = "source_attribution"

GROUPS: dict[str, str] = {
    CONTEXT_RELIANCE: "Did the answer depend on the context?",
    PARAMETRIC_KNOWLEDGE: "Would the model give this answer without the context?",
    CONTEXT_FAMILIARITY: "Does the context text look familiar to the model?",
    RECALL_VS_REASONING: "Is the query answered by recall or by reasoning?",
    SOURCE_ATTRIBUTION: "Which input words drive the answer?",
}
"""The question each group of detectors answers, in display order. Only the first two feed the headline
verdict; the groups are never counted against each other."""


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
        higher_means: ``"memorized"`` if a higher raw score means more likely memorized, else ``"grounded"``.
        score: ``score(inp) -> float`` (raw score, in the method's own units).
        cost: ``"free"`` (from the result alone), ``"forward"`` (extra forward passes), ``"generate"``
            (extra generations) or ``"heavy"`` (many generations); the UI warns before heavy ones.
        source: the paper / section it implements.
        needs_fit: the score needs a model fitted on other rows (then it must be cross-validated).
        features: for ``needs_fit`` detectors, ``features(inp) -> 1-D float array`` per row; evaluation fits
            the model on the other folds' features and labels (stratified 5-fold ``cross_val_predict``, seed
            42: see :mod:`core.detectors.fitted`), so no row is scored by a model trained on it. ``score`` is
            then only used outside evaluation (it may raise). A ``needs_fit`` detector without ``features``
            (fitted once on its own bundled data) is scored by ``score`` like any other.
        group: the question the detector answers, a key of :data:`GROUPS`.
    """

    name: str
    label: str
    higher_means: str
    score: Callable[[DetectorInput], float]
    cost: str = "free"
    source: str = ""
    needs_fit: bool = False
    features: Callable[[DetectorInput], np.ndarray] | None = None
    group: str = CONTEXT_RELIANCE

    def oriented(self, value: float) -> float:
        """The score oriented so that higher = more likely memorized (positive class)."""
        return float(value) if self.higher_means == MEMORIZED_HIGH else -float(value)


REGISTRY: dict[str, Detector] = {}
"""Every registered detector by name, in registration order (the catalog's order)."""

FAMILIES: list[tuple[re.Pattern[str], Callable[[re.Match[str]], Detector], list[str]]] = []
"""Parametric detectors: (full-match pattern, factory from the match, names listed by default)."""


def register(detector: Detector) -> Detector:
    """Add a detector to the registry (re-registering the same name replaces it)."""
    if detector.higher_means not in (MEMORIZED_HIGH, GROUNDED_HIGH):
        raise ValueError(f"higher_means must be 'memorized' or 'grounded', got {detector.higher_means!r}")
    if detector.group not in GROUPS:
        raise ValueError(f"group must be one of {', '.join(GROUPS)}, got {detector.group!r}")
    REGISTRY[detector.name] = detector
    return detector


def declare(*rows: Mapping[str, Any], **shared: Any) -> list[Detector]:
    """Register one detector per row of a declarative table: ``Detector(**shared, **row)`` for each row.

    ``shared`` holds the fields every row has in common (a row's own value wins), so a family module states
    its detectors as one table instead of one ``register(Detector(...))`` block each.

    Raises:
        TypeError: a row names a field :class:`Detector` does not have.
        ValueError: as :func:`register`.
    """
    return [register(Detector(**{**shared, **row})) for row in rows]


def register_family(pattern: str, factory: Callable[[re.Match[str]], Detector], listed: Iterable[str] = ()) -> None:
    """Register detectors named by a parameter (e.g. ``min_k_<k>``).

    Args:
        pattern: a regular expression the whole name must match.
        factory: builds the detector from the match (raises ``ValueError`` for a bad parameter).
        listed: names of the family that :func:`available` lists by default.
    """
    FAMILIES.append((re.compile(pattern), factory, list(listed)))
    for name in listed:
        get(name)


def _load_catalog() -> None:
    import core.detectors.catalog  # noqa: F401 - importing it registers every family


def get(name: str) -> Detector | None:
    """The detector called ``name``: a registered one, or a family member built (and registered) on demand.

    Returns ``None`` for an unknown name or a family name whose parameter is out of range.
    """
    _load_catalog()
    if name in REGISTRY:
        return REGISTRY[name]
    for pattern, factory, _ in FAMILIES:
        match = pattern.fullmatch(name)
        if match:
            try:
                return register(factory(match))
            except ValueError:
                return None
    return None


def resolve(names: Iterable[str]) -> list[Detector]:
    """The detectors for ``names``, in order.

    Raises:
        ValueError: naming every unknown detector and the known ones.
    """
    names = list(names)
    found = {n: get(n) for n in names}
    missing = [n for n, d in found.items() if d is None]
    if missing:
        raise ValueError(f"Unknown detector(s): {', '.join(missing)}. Known: {', '.join(available())}")
    return [found[n] for n in names]  # type: ignore[misc]


def available() -> dict[str, Detector]:
    """Every registered detector by name (the catalog imported first)."""
    _load_catalog()
    return dict(REGISTRY)
