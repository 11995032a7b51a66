"""ReDeEP (Sun et al., ICLR 2025, arXiv 2410.11414): the answer's agreement with what copying heads fetched from the
context (ECS) against how much knowledge MLPs rewrote the prediction (PKS), per answer token.

* :mod:`~core.methods.redeep.maths` — JSD (float32 log-space, nats), cosine, top-k %, OV copying score, Pearson;
* :mod:`~core.methods.redeep.forward` — one traced forward of the retrieval path: ECS per token × head, PKS per
  token × layer (:func:`redeep_trace`);
* :mod:`~core.methods.redeep.ov` — the label-free OV-circuit copying score of every head;
* :mod:`~core.methods.redeep.choice` — chosen heads/layers and α, β per model (Pearson on calibration data or
  the OV score; stored as JSON, overridable);
* :mod:`~core.methods.redeep.analysis` — the per-token view (:func:`decompose`).
"""

from core.methods.redeep.analysis import ReDeEPView, decompose, row_means
from core.methods.redeep.choice import (
    OV,
    OVERRIDE_ENV,
    PEARSON,
    USER,
    CalibrationTable,
    ReDeEPChoice,
    choice_for,
    default_choice,
    fit_choice,
    is_fitted,
    load_choice_for,
    load_table_for,
    parse_heads,
    parse_layers,
    refit,
)
from core.methods.redeep.forward import DEFAULT_K_PERCENT, ReDeEPTrace, pks_refusal, redeep_trace
from core.methods.redeep.maths import copying_score, cosine, jsd, n_top, pearson
from core.methods.redeep.ov import ov_copying_scores, ov_eigenvalues

__all__ = [
    "DEFAULT_K_PERCENT",
    "OV",
    "OVERRIDE_ENV",
    "PEARSON",
    "USER",
    "CalibrationTable",
    "ReDeEPChoice",
    "ReDeEPTrace",
    "ReDeEPView",
    "choice_for",
    "copying_score",
    "cosine",
    "decompose",
    "default_choice",
    "fit_choice",
    "is_fitted",
    "jsd",
    "load_choice_for",
    "load_table_for",
    "n_top",
    "ov_copying_scores",
    "ov_eigenvalues",
    "parse_heads",
    "parse_layers",
    "pearson",
    "pks_refusal",
    "redeep_trace",
    "refit",
    "row_means",
]
