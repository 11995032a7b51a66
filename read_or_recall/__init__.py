"""Read or Recall in a notebook: did the model read the retrieved context, or recall the answer from memory?

The public face of the engine (``core/``): three lines give a verdict and a chart::

    import read_or_recall as rr
    lab = rr.Lab()                                     # the embedded model (offline); rr.Lab("path/or/id")
    r = lab.run("Where is the Eiffel Tower?", "The Eiffel Tower stands in Rome.")
    r                                                  # in Jupyter: the headline, both answers, the KL chart

Then ``r.verdict`` / ``r.axes`` / ``r.span`` (the two-axis headline, as ``python -m core run --json`` says it),
``r.detectors()`` (every detector, grouped by the question it answers), ``r.figure(name)`` (every chart a page
draws of a run: :func:`figures`), ``r.swap_test()``, ``lab.ablate(r, "10-15")``, ``lab.evaluate(df)`` and
:func:`register_detector` for a detector of your own. Depth: docs/notebook.md.

Nothing here imports Streamlit; every number comes from ``core`` exactly as the app and the CLI compute it.
"""

from __future__ import annotations

from typing import Any

from read_or_recall.calibration import calibrate, status
from read_or_recall.lab import Ablation, Evaluation, Lab, noise_grid_figure
from read_or_recall.registry import FIGURES, figure_names
from read_or_recall.registry import describe as _describe_figures
from read_or_recall.run import Run

__version__ = "0.1.0"


def figures() -> list[dict[str, str]]:
    """Every chart of a run that ``run.figure(name)`` draws: name, page, what it shows, cost, options."""
    return _describe_figures()


def register_detector(detector: Any = None, /, **declaration: Any) -> Any:
    """Register a detector of your own: one declaration (docs/detectors.md), from then on scored everywhere —
    ``run.detectors()``, ``lab.evaluate(df, detectors=[…])``, the agreement view, the behavior report and (with
    ``combine=True``) the combined detector's candidates.

    Args:
        detector: a :class:`core.detectors.Detector`; or leave it out and give its fields as keywords
            (``name``, ``score``, ``higher_means``, ``label``, ``group``, ``thresholds``, …).

    Returns:
        The registered :class:`core.detectors.Detector` (registering a name again replaces it).

    Raises:
        ValueError: a declaration the project cannot use (the message names the field).
    """
    from core.detectors import Detector, register

    if detector is None:
        detector = Detector(**declaration)
    elif declaration:
        raise ValueError("Give a Detector or its fields as keywords, not both.")
    return register(detector)


def unregister_detector(name: str) -> Any:
    """Remove a registered detector (``None`` when none had that name)."""
    from core.detectors import unregister

    return unregister(name)


def detectors() -> list[dict[str, Any]]:
    """Every registered detector's declaration as plain data (:meth:`core.detectors.Detector.describe`)."""
    from core.detectors import available

    return [d.describe() for d in available().values()]


__all__ = [
    "FIGURES",
    "Ablation",
    "Evaluation",
    "Lab",
    "Run",
    "__version__",
    "calibrate",
    "detectors",
    "figure_names",
    "figures",
    "noise_grid_figure",
    "register_detector",
    "status",
    "unregister_detector",
]
