"""A model's own calibration: what the headline and RePCS' τ are calibrated with, and the hook that calibrates.

The headline's two axes are fitted per model (:mod:`core.engine.axes_calibration`); a model without its own axes
calibration gets the verdict ``"uncalibrated"`` with its raw observations — never another model's cut. RePCS' τ is
resolved per model too (:func:`core.engine.tau_resolution.tau_in_force`), from the same record.

**The calibration hook** (:func:`calibrate`): the per-model calibration is made by the engine's ``calibrate-model``
(``python -m core calibrate-model --model …``). :func:`calibrate` is the notebook's door to it: it calls
:func:`core.evaluation.calibrate.calibrate_model` directly (``calibrate_model(handle, **options)``).
:meth:`read_or_recall.Lab.calibration` then reads the model's calibration through :func:`status`, which reads the
model's calibration record (:mod:`core.engine.calibration_record`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from core.model.handle import ModelHandle
    from read_or_recall.lab import Lab


def status(model: ModelHandle | str, template: str = "auto") -> dict[str, Any]:
    """What ``model`` (a loaded model's handle) is calibrated with: its calibration record
    (:func:`core.engine.calibration_record.record_for`, by the model's identity and the resolved ``template``) —
    the same record its runs are decided under. A bare name finds no calibration file (only the embedded model's
    bundled record).

    Returns:
        ``{"model", "id", "axes": {"calibrated", "source", "how"}, "tau": {"source", "in_force"}}``: the record's
        key, the headline's axes calibration (``calibrated`` false: the headline says ``"uncalibrated"``; ``how``:
        the command that makes one) and RePCS' τ in force with where it comes from.
    """
    from core.engine.calibration_record import ModelCalibration, record_for
    from core.engine.tau_resolution import default_record, tau_in_force
    from core.engine.threshold import describe_in_force
    from core.model.calibration_store import calibrate_command

    if isinstance(model, str):
        name, source, record = model, "", default_record(model, None)  # the embedded model's bundled record
    else:
        name, source, record = model.info.name, model.info.source, record_for(model, template)
    threshold, tau_source = tau_in_force(name, calibration=record)
    cal = record.axes if isinstance(record, ModelCalibration) else None  # (None: not calibrated for this model)
    return {
        "model": name,
        "id": None if record is None else record.key,
        "axes": {
            "calibrated": cal is not None,
            "source": None if cal is None else cal.source,
            "how": calibrate_command(name, source),
        },
        "tau": {"source": tau_source, "in_force": describe_in_force(threshold)},
    }


def calibrate(lab: Lab, **options: Any) -> Any:
    """Calibrate ``lab``'s model (the headline's axes and what it needs) with the engine's ``calibrate-model``.

    Args:
        lab: the model to calibrate.
        options: passed on to the engine's calibration (its own options: rows, seeds, progress …).

    Returns:
        What the engine's calibration returns; :meth:`read_or_recall.Lab.calibration` then reports it, and every
        new run of the model gets a calibrated headline.
    """
    from core.evaluation.calibrate import calibrate_model

    return calibrate_model(lab.handle, **options)
