"""One-step calibration of every per-model artifact for any model (``python -m core calibrate-model``).

From the bundled behavior data — ``assets/validation/rows.csv``: ROME facts asked with the relation's question and
stated in the context (conflicting, agreeing, on-topic), NQ-Swap passages (substituted or as written), the project's
conflict and invented-fact rows, with the grouped split of :mod:`core.evaluation.constructions` —
:func:`calibrate_model` builds the model's **own** behavior-labeled rows and fits everything that turns a score into
a verdict for it. The package is the pipeline's stages, one module each:

* :mod:`~core.evaluation.calibrate.budget` — what a run may spend (:class:`Budget`: rows or minutes) and the batch
  size (:func:`batch_size_for`);
* :mod:`~core.evaluation.calibrate.rows` — the rows in units, in a seeded order in which any prefix is balanced;
* :mod:`~core.evaluation.calibrate.checkpoints` — the work folder (:class:`Work`): checkpoints read back with every
  damage named, and the lock that refuses a second run of the same folder;
* :mod:`~core.evaluation.calibrate.stages` — the stage table that drives the run (RADAR, rows, swap tests, the
  headline's fits — τ and the axes, usable at once — the CRM basis, the detectors' fits, the card), with
  :mod:`~core.evaluation.calibrate.score` (the rows and swap tests)
  and :mod:`~core.evaluation.calibrate.progress` (the stage and the whole job's time left);
* :mod:`~core.evaluation.calibrate.records`, :mod:`~core.evaluation.calibrate.fits`,
  :mod:`~core.evaluation.calibrate.heldout` — what a scored row holds, the fits on the calibration rows, the
  figures on the report rows;
* :mod:`~core.evaluation.calibrate.save` — the one writer of every file, where its lookup finds it;
* :mod:`~core.evaluation.calibrate.run` — :func:`calibrate_model` and :func:`estimate_calibration`.

The notebook and the page call it directly: ``from core.evaluation.calibrate import calibrate_model``.
"""

from core.evaluation.calibrate.budget import DEFAULT_MINUTES, DEFAULT_ROWS, MAX_BATCH_ROWS, Budget, batch_size_for
from core.evaluation.calibrate.checkpoints import DamagedCheckpoint, FolderInUse, Work
from core.evaluation.calibrate.rows import ROWS_CSV, Unit, order_units, read_rows, units_of
from core.evaluation.calibrate.run import calibrate_model, estimate_calibration

__all__ = [
    "DEFAULT_MINUTES",
    "DEFAULT_ROWS",
    "MAX_BATCH_ROWS",
    "ROWS_CSV",
    "Budget",
    "DamagedCheckpoint",
    "FolderInUse",
    "Unit",
    "Work",
    "batch_size_for",
    "calibrate_model",
    "estimate_calibration",
    "order_units",
    "read_rows",
    "units_of",
]
