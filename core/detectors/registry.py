"""The detector registry: every method that scores a prompt for "memorized vs grounded", one declaration each.

A detector is a :class:`Detector`: one frozen declaration that carries **everything the rest of the project asks
of it** — the score and its direction, the group (the question it answers), where its threshold comes from
(:attr:`Detector.thresholds`) and how its verdict is read (:attr:`Detector.reading`), what it reads from the run
(:attr:`Detector.reads`, for the shared-pass planner), its cost and time estimate, its words (short name, note),
the artifact it needs, the details it leaves and the page that explains it. The agreement view, the shared-pass
planner, the wording, ``evaluate``, the behavior report and the combined detector iterate over declarations;
no table elsewhere is keyed by a detector's name, so registering a detector (in a family module, a script or a
notebook) is all it takes for it to appear everywhere (docs/detectors.md).

Each family is one module in :mod:`core.detectors` that calls :func:`register` or :func:`declare` (or
:func:`register_family` for detectors named by a parameter, e.g. ``min_k_<k>``) at import;
:mod:`core.detectors.catalog` imports every family, and :func:`available` / :func:`get` / :func:`resolve` are how
the rest of the project finds them.

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


COSTS = ("free", "forward", "generate", "heavy")
"""A detector's cost: from the result alone, extra forward passes, extra generations, many generations."""
CHEAP_COSTS = ("free", "forward")
"""Costs the agreement view scores at once (no extra generation)."""

RETRIEVAL_TRACE = "retrieval trace"
""":attr:`Detector.reads`: the retrieval path's traced forward beyond the last prompt token (attention, MLPs,
every position): one per row, shared (:func:`core.detectors.shared.retrieval_pass`)."""
PROMPT_STATES = "prompt states"
""":attr:`Detector.reads`: both paths' residual stream at the last prompt token (CRM's h^c and h^0)."""
CONTEXT_TEXT = "context text"
""":attr:`Detector.reads`: a forward over the context text alone (its token statistics)."""
QUERY_TEXT = "query text"
""":attr:`Detector.reads`: a forward over the query alone (RADAR's prompt)."""
READS = (RETRIEVAL_TRACE, PROMPT_STATES, CONTEXT_TEXT, QUERY_TEXT)
"""Everything a detector may read beyond the run's result; what it reads from the result itself is free."""
RUN_READS = frozenset({RETRIEVAL_TRACE, PROMPT_STATES})
"""What a recorded run keeps for its detectors (``run_dual_path(…, record=True)``)."""

EVALUATE_PAGE = "Evaluate"
"""The page of a detector that no analysis page explains: scored there on labeled data."""


@dataclass
class DetectorInput:
    """What a detector sees for one row."""

    handle: ModelHandle
    result: DualPathResult
    settings: DualPathSettings
    cache: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class DetectorThreshold:
    """A detector's threshold and a sentence saying where it came from (``value`` is ``None`` when unknown)."""

    value: float | None
    source: str


ThresholdRule = Callable[["Detector", DetectorInput], DetectorThreshold | None]
"""One place a threshold may come from: ``rule(detector, inp) -> DetectorThreshold | None`` (``None``: not here,
ask the next rule). :mod:`core.detectors.thresholds` has the shared ones."""
Reading = Callable[["Detector", DetectorInput, float | None, DetectorThreshold], tuple[str, DetectorThreshold]]
"""How a score becomes a verdict: ``reading(detector, inp, score, threshold) -> (verdict, threshold shown)``."""
Estimate = Callable[[ModelHandle, DualPathSettings], float | None]
"""Seconds a detector will take on this handle with these run settings (``None``: nothing measured yet)."""


@dataclass(frozen=True)
class Details:
    """What a detector leaves in ``DetectorInput.cache`` for the JSON of ``detect`` and the pages.

    Attributes:
        key: the cache key (a constant of :mod:`core.detectors.keys`).
        schema: each field of the details and what it holds (units, shapes), for readers and the docs.
        to_json: turns the cached value into a JSON-ready dict (``None``: it already is one).
    """

    key: str
    schema: Mapping[str, str]
    to_json: Callable[[Any], dict[str, Any]] | None = None

    def of(self, inp: DetectorInput) -> dict[str, Any] | None:
        """The row's details as JSON, or ``None`` when the detector has not left any."""
        value = inp.cache.get(self.key)
        if value is None:
            return None
        return self.to_json(value) if self.to_json is not None else value


@dataclass(frozen=True)
class Detector:
    """One detector's declaration: everything the project asks of it.

    Attributes:
        name: short key used in JSON (``detectors.<name>``) and CSV columns.
        label: human label for tables and legends.
        higher_means: ``"memorized"`` if a higher raw score means more likely memorized, else ``"grounded"``.
        score: ``score(inp) -> float`` (raw score, in the method's own units).
        cost: ``"free"`` (from the result alone), ``"forward"`` (extra forward passes), ``"generate"``
            (extra generations) or ``"heavy"`` (many generations); the UI warns before heavy ones. Free and forward
            detectors are scored at once in the agreement view, the others on request.
        source: the paper / section it implements.
        needs_fit: the score needs a model fitted on other rows (then it must be cross-validated).
        features: for ``needs_fit`` detectors, ``features(inp) -> 1-D float array`` per row; evaluation fits
            the model on the other folds' features and labels (stratified 5-fold ``cross_val_predict``, seed
            42: see :mod:`core.detectors.fitted`), so no row is scored by a model trained on it. ``score`` is
            then only used outside evaluation (it may raise). A ``needs_fit`` detector without ``features``
            (fitted once on its own bundled data) is scored by ``score`` like any other.
        group: the question the detector answers, a key of :data:`GROUPS`.
        short: its short name in sentences and tables ("RePCS"); ``""``: the name.
        note: one clause when its verdict means something narrower than the others' (shown next to it).
        thresholds: where its threshold comes from, tried in order (:data:`ThresholdRule`; the first that finds
            one wins); ``None``: the bundled per-detector calibration of the model
            (:func:`core.detectors.thresholds.bundled_calibration`). None found: no threshold, verdict
            "uncalibrated".
        reading: how its score and threshold become a verdict (:data:`Reading`); ``None``: the side of the
            threshold (:func:`core.detectors.thresholds.verdict_for`).
        follows_run: its threshold and verdict are the run's own (RePCS' τ in force), read again when the run is
            re-decided under another τ (:func:`core.detectors.agreement.with_result`).
        ready: ``ready(inp) -> reason | None``: a check that keeps a cheap view cheap (a detector whose one-off
            setup is long is skipped with the reason); ``None``: always ready.
        estimate: its time estimate (:data:`Estimate`, through :mod:`core.engine.estimate`); ``None``: one
            generation of ``max_new_tokens`` for a costly detector, nothing for a cheap one.
        work: ``work(inp) -> Work``, its units of work on the row (:mod:`core.methods.work`: the answers it
            generates and the prompts they read), which its time estimate scales; ``None``: the row's answer steps
            for a ``"generate"`` detector, its token budget otherwise.
        reads: what it reads beyond the run's result (:data:`READS`): the shared-pass planner
            (:mod:`core.detectors.shared`) runs a pass once per row for every planned detector that reads it,
            and a run that keeps :data:`RUN_READS` is recorded for them.
        artifact: the per-model file it needs (a :class:`core.model.artifacts.ArtifactKind`), ``None`` for none.
        details: what it leaves in the row's cache (:class:`Details`), ``None`` for nothing.
        page: the title of the page that explains it (the agreement view links there).
        combine: offer its score to the combined detector as a candidate feature
            (:func:`core.detectors.combined.candidates`; the cross-validated ``combined_cv`` then refits with it).
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
    short: str = ""
    note: str | None = None
    thresholds: tuple[ThresholdRule, ...] | None = None
    reading: Reading | None = None
    follows_run: bool = False
    ready: Callable[[DetectorInput], str | None] | None = None
    estimate: Estimate | None = None
    work: Callable[[DetectorInput], Any] | None = None
    reads: frozenset[str] = frozenset()
    artifact: Any = None
    details: Details | None = None
    page: str = EVALUATE_PAGE
    combine: bool = False

    def oriented(self, value: float) -> float:
        """The score oriented so that higher = more likely memorized (positive class)."""
        return float(value) if self.higher_means == MEMORIZED_HIGH else -float(value)

    @property
    def short_name(self) -> str:
        """The short name in sentences and tables (:attr:`short`, else the name)."""
        return self.short or self.name

    @property
    def is_cheap(self) -> bool:
        """No extra generation: scored at once in the agreement view."""
        return self.cost in CHEAP_COSTS

    @property
    def single_row(self) -> bool:
        """Whether it scores one row on its own (cross-validated detectors only score an evaluation)."""
        return not (self.needs_fit and self.features is not None)

    def check(self) -> None:
        """Refuse a declaration the project could not use.

        Raises:
            ValueError: naming the bad field.
        """
        if not self.name or not isinstance(self.name, str):
            raise ValueError(f"a detector needs a name, got {self.name!r}")
        if self.higher_means not in (MEMORIZED_HIGH, GROUNDED_HIGH):
            raise ValueError(f"higher_means must be 'memorized' or 'grounded', got {self.higher_means!r}")
        if self.group not in GROUPS:
            raise ValueError(f"group must be one of {', '.join(GROUPS)}, got {self.group!r}")
        if self.cost not in COSTS:
            raise ValueError(f"cost must be one of {', '.join(COSTS)}, got {self.cost!r}")
        unknown = sorted(set(self.reads) - set(READS))
        if unknown:
            raise ValueError(f"reads must be among {', '.join(READS)}; unknown: {', '.join(unknown)}")
        if not callable(self.score):
            raise ValueError(f"{self.name}: score must be a function of a DetectorInput")

    def describe(self) -> dict[str, Any]:
        """The declaration as plain data (what a table of detectors, the docs or a notebook shows)."""
        return {
            "name": self.name,
            "short": self.short_name,
            "label": self.label,
            "group": self.group,
            "question": GROUPS[self.group],
            "higher_means": self.higher_means,
            "cost": self.cost,
            "source": self.source,
            "needs_fit": self.needs_fit,
            "single_row": self.single_row,
            "reads": sorted(self.reads),
            "artifact": getattr(self.artifact, "name", None),
            "details": None if self.details is None else dict(self.details.schema),
            "page": self.page,
            "note": self.note,
            "combine": self.combine,
            "replaces": getattr(REPLACED.get(self.name), "label", None) if REGISTRY.get(self.name) is self else None,
        }


REGISTRY: dict[str, Detector] = {}
"""Every registered detector by name, in registration order (the catalog's order)."""

FAMILIES: list[tuple[re.Pattern[str], Callable[[re.Match[str]], Detector], list[str]]] = []
"""Parametric detectors: (full-match pattern, factory from the match, names listed by default)."""


REPLACED: dict[str, Detector] = {}
"""Built-in detectors replaced with ``overwrite=True`` (by name): the original, back on :func:`unregister`."""


def is_builtin(detector: Detector) -> bool:
    """Whether ``detector`` is one the engine declares (its score function lives in ``core``), not a plugin's."""
    score = getattr(detector.score, "func", detector.score)  # a functools.partial: its function
    return str(getattr(score, "__module__", "") or "").startswith("core.")


def replaced_builtin(name: str) -> Detector | None:
    """The built-in detector that the detector registered as ``name`` replaced (``overwrite=True``), else ``None``."""
    return REPLACED.get(name)


def register(detector: Detector, *, overwrite: bool = False) -> Detector:
    """Add a detector to the registry. Registering a plugin's name again replaces it; a built-in's name is refused
    unless ``overwrite=True`` (as Inseq's ``register_step_function``), and the replacement is then marked
    (:func:`replaced_builtin`, ``replaces`` in :meth:`Detector.describe`) until :func:`unregister` brings the built-in
    back.

    Raises:
        ValueError: the declaration is not usable (:meth:`Detector.check`), or it takes a built-in's name without
            ``overwrite=True``.
    """
    detector.check()
    current = REGISTRY.get(detector.name) or (None if is_builtin(detector) else get(detector.name))
    builtin = REPLACED.get(detector.name) or (current if current is not None and is_builtin(current) else None)
    if builtin is not None and not is_builtin(detector):
        if not overwrite:
            raise ValueError(
                f"{detector.name!r} is a built-in detector ({builtin.label}); give yours another name, or pass "
                "overwrite=True to replace it everywhere (its rows are then marked as replacing the built-in)."
            )
        REPLACED[detector.name] = builtin
    REGISTRY[detector.name] = detector
    return detector


def unregister(name: str) -> Detector | None:
    """Remove a registered detector (a notebook's, a test's); returns it, or ``None`` when none had that name. A
    built-in it replaced (``overwrite=True``) is registered again."""
    removed = REGISTRY.pop(name, None)
    builtin = REPLACED.pop(name, None)
    if builtin is not None:
        REGISTRY[name] = builtin
    return removed


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


def is_family_member(name: str) -> bool:
    """Whether ``name`` is a member of a detector family (named by a parameter, e.g. ``min_k_10``)."""
    return any(pattern.fullmatch(name) for pattern, _, _ in FAMILIES)


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
