"""Read or Recall in a notebook: did the model read the retrieved context, or recall the answer from memory?

The public face of the engine (``core/``): three lines give a verdict and a chart::

    import read_or_recall as rr
    lab = rr.Lab()                                     # the embedded model (offline); rr.Lab("path/or/id")
    r = lab.run("Where is the Eiffel Tower?", "The Eiffel Tower stands in Rome.")
    r                                                  # in Jupyter: the headline, both answers, the KL chart

**The rule for verbs:** a verb belongs to what it studies. Everything about one run's inputs is a method of the
run — ``r.detectors()``, ``r.figure(name)``, ``r.swap_test()``, ``r.self_critique()``, ``r.sma()``,
``r.context_ablation()``, ``r.ablate("10-15")``, ``r.dose_response(…)``, ``r.layer_sweep(…)`` —; the lab's methods are
about the model over many inputs (``lab.run``, ``lab.run_many``, ``lab.evaluate(df)``) or the model itself
(``lab.calibration()``, ``lab.calibrate()``). Every verb returns a named result (:mod:`read_or_recall.results`) with
``figure(name)`` through the one registry (:func:`figures`) and ``to_dict()``; no call changes an earlier result.
``r.computed()`` lists what a run holds, ``r.estimate(verb)`` what a call will compute and roughly how long.
:func:`register_detector` adds a detector of your own. Depth: docs/notebook.md.

Nothing here imports Streamlit or the app; every number comes from ``core`` exactly as the app and the CLI compute
it, every chart from the :mod:`figures` package the pages draw with.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

# tqdm.auto (imported by the model libraries) warns "IProgress not found" in a kernel without ipywidgets; the API
# reports progress through its own callbacks, so the warning says nothing to act on here.
warnings.filterwarnings("ignore", message="IProgress not found")

from read_or_recall.lab import Lab  # noqa: E402 - after the warning filter
from read_or_recall.registry import FIGURES, figure_names  # noqa: E402
from read_or_recall.registry import describe as _describe_figures  # noqa: E402
from read_or_recall.results import (  # noqa: E402
    Ablation,
    Calibration,
    ContextAblation,
    Evaluation,
    NoiseSweep,
    Result,
    SelfCritique,
    SourceAttribution,
    SwapTest,
)
from read_or_recall.run import Run  # noqa: E402

if TYPE_CHECKING:
    from core.detectors import Detector

__version__ = "0.1.0"


def figures() -> list[dict[str, str]]:
    """Every chart of the API's results: the result it belongs to (``of``: ``Run``, ``Ablation``, ``NoiseSweep``,
    ``Evaluation``, ``SelfCritique``, ``SourceAttribution``, ``ContextAblation``), name, page, what it shows, cost,
    options."""
    return _describe_figures()


def register_detector(detector: Detector | None = None, /, *, overwrite: bool = False, **declaration: Any) -> Detector:
    """Register a detector of your own: one declaration (docs/detectors.md), from then on scored everywhere —
    ``run.detectors()`` (of every run, also one made before), ``lab.evaluate(df, detectors=[…])``, the agreement
    view, the behavior report and (with ``combine=True``) the combined detector's candidates.

    Args:
        detector: a :class:`core.detectors.Detector`; or leave it out and give its fields as keywords
            (``name``, ``label``, ``score``, ``higher_means`` required; ``group``, ``thresholds``, …).
        overwrite: replace a built-in detector of the same name (refused otherwise); its rows are marked
            (``replaces`` in ``run.detectors()``, ``rr.detectors()``), and :func:`unregister_detector` brings the
            built-in back. Registering your own detector's name again replaces it.

    Returns:
        The registered :class:`core.detectors.Detector`.

    Raises:
        ValueError: a declaration the project cannot use, a missing or unknown field, or a built-in's name without
            ``overwrite=True`` (the message names the field or the detector).
    """
    import dataclasses

    from core.detectors import Detector
    from core.detectors.registry import register

    if detector is None:
        fields = {f.name: f for f in dataclasses.fields(Detector)}
        unknown = sorted(set(declaration) - set(fields))
        if unknown:
            raise ValueError(f"Unknown detector field(s): {', '.join(unknown)}. The fields: {', '.join(fields)}.")
        required = [
            n
            for n, f in fields.items()
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ]
        missing = [n for n in required if n not in declaration]
        if missing:
            raise ValueError(f"A detector needs the field(s) {', '.join(missing)} (required: {', '.join(required)}).")
        detector = Detector(**declaration)
    elif declaration:
        raise ValueError("Give a Detector or its fields as keywords, not both.")
    return register(detector, overwrite=overwrite)


def unregister_detector(name: str) -> Detector | None:
    """Remove a registered detector (``None`` when none had that name); a built-in you replaced comes back."""
    from core.detectors import unregister

    return unregister(name)


def detectors() -> list[dict[str, Any]]:
    """Every registered detector's declaration as plain data (:meth:`core.detectors.Detector.describe`; ``replaces``:
    the built-in's label where yours replaced it)."""
    from core.detectors import available

    return [d.describe() for d in available().values()]


__all__ = [
    "FIGURES",
    "Ablation",
    "Calibration",
    "ContextAblation",
    "Evaluation",
    "Lab",
    "NoiseSweep",
    "Result",
    "Run",
    "SelfCritique",
    "SourceAttribution",
    "SwapTest",
    "__version__",
    "detectors",
    "figure_names",
    "figures",
    "register_detector",
    "unregister_detector",
]
