"""The per-layer trajectory of a run, clean or under an intervention (CRM level 3).

The displacement d_ℓ = h_ℓ(context) − h_ℓ(no context) at the last prompt token comes from
:func:`core.methods.internals.displacement`; it runs forward passes through the handle, so inside an
intervention context it gives the perturbed d_ℓ. With a calibrated CRM basis
(:func:`core.methods.crm.load_basis`) the trajectory is LTS_ℓ = ⟨d_ℓ, v_ℓ⟩ and the CRM anomaly rule flags
layers; without one it is ‖d_ℓ‖₂, with a note saying so.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.engine import DualPathResult
from core.methods.crm import CrmBasis, load_basis
from core.methods.internals import displacement as internals_displacement
from core.model.handle import ModelHandle

logger = logging.getLogger(__name__)


@dataclass
class Trajectory:
    """A per-layer quantity of the displacement d_ℓ = h_ℓ(context) − h_ℓ(no context) at the last prompt token.

    Attributes:
        kind: ``"lts"`` (LTS_ℓ = ⟨d_ℓ, v_ℓ⟩ on the calibrated CRM basis) or ``"l2"`` (‖d_ℓ‖₂, when no
            basis is available).
        values: shape ``(L + 1,)``; index 0 is the embedding output, index ℓ + 1 decoder layer ℓ.
        note: what was computed and why (shown under the chart).
        flagged: decoder layers the CRM anomaly rule flags (empty without a basis).
    """

    kind: str
    values: np.ndarray
    note: str
    flagged: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "values": np.asarray(self.values, dtype=np.float64).tolist(),
            "note": self.note,
            "flagged": list(self.flagged),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trajectory:
        return cls(
            str(data["kind"]),
            np.asarray(data["values"], dtype=np.float64),
            str(data.get("note", "")),
            [int(x) for x in data.get("flagged", [])],
        )


def displacement(handle: ModelHandle, result: DualPathResult) -> np.ndarray:
    """d_ℓ for every hidden state, ``(L + 1, d)`` float64 (:func:`core.methods.internals.displacement`).

    Row 0 is the embedding output, row ℓ + 1 the output of decoder layer ℓ. Runs forward passes through
    ``handle``, so inside an intervention context it gives the perturbed d_ℓ.
    """
    return np.asarray(internals_displacement(handle, result), dtype=np.float64)


def crm_basis(handle: ModelHandle, template: str = "auto") -> CrmBasis | None:
    """The calibrated CRM basis of this model and template, or ``None`` (none calibrated, or unreadable)."""
    try:
        return load_basis(handle, template)
    except (OSError, ValueError) as exc:
        logger.warning("CRM basis could not be loaded: %s", exc)
        return None


def layer_trajectory(handle: ModelHandle, result: DualPathResult, basis: CrmBasis | None = None) -> Trajectory:
    """LTS_ℓ on the CRM basis if one is calibrated for this model, else ‖d_ℓ‖₂ (with a note saying so)."""
    d = displacement(handle, result)
    basis = basis if basis is not None else crm_basis(handle, str(result.settings.get("template", "auto")))
    if basis is not None:
        lts = np.asarray(basis.lts(d), dtype=np.float64)
        flagged = _as_decoder_layers(basis.flagged(lts), handle.info.n_layers)
        return Trajectory("lts", lts, "LTS_ℓ = ⟨d_ℓ, v_ℓ⟩ on the calibrated PC1 direction of each layer.", flagged)
    return Trajectory(
        "l2",
        np.linalg.norm(d, axis=1),
        "No CRM basis is calibrated for this model, so the chart shows ‖d_ℓ‖₂, the length of the displacement "
        "at each layer, instead of its projection on PC1 (LTS).",
    )


def flagged_layers(handle: ModelHandle, clean: DualPathResult) -> list[int] | None:
    """The decoder layers the CRM anomaly rule flags for this clean run (``None`` without a basis)."""
    basis = crm_basis(handle, str(clean.settings.get("template", "auto")))
    if basis is None:
        return None
    return layer_trajectory(handle, clean, basis).flagged


def _as_decoder_layers(flagged: Sequence[int], n_layers: int) -> list[int]:
    """Flagged indices of an ``(L + 1,)`` trajectory (0 = embeddings) → decoder layers (0-based)."""
    return sorted({int(i) - 1 for i in flagged if 1 <= int(i) <= n_layers})
