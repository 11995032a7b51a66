"""What an intervention does, as plain frozen data: :class:`NoiseSpec`, :class:`PatchSpec`, and
:class:`InterventionStats` (what it actually did). No model code here."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from core.model.parts import ModelParts

MAX_EPS = 100.0
"""The largest noise scale ε accepted (a typo guard)."""


@dataclass(frozen=True)
class NoiseSpec:
    """Noise injection h′ = h + ε·σ(h)·N(0, 1) at the output of ``layers`` (CRM §4.4).

    Attributes:
        layers: decoder layers (0-based).
        eps: ε ≥ 0, the noise scale relative to each token's activation standard deviation.
        seed: seeds the noise field z(seed, layer, position) (:mod:`core.methods.ablation.noise`).
    """

    layers: tuple[int, ...]
    eps: float
    seed: int = 0

    def validate(self, parts: ModelParts) -> None:
        """Check the layers against ``parts``, ε and the seed.

        Raises:
            ValueError: no layer, a layer out of range, ε outside ``[0, MAX_EPS]`` or a bad seed.
        """
        _check_layers(parts, self.layers, "Noise")
        if not isinstance(self.eps, (int, float)) or not math.isfinite(self.eps) or not 0 <= self.eps <= MAX_EPS:
            raise ValueError(f"ε must be a finite number in [0, {MAX_EPS:g}], got {self.eps!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)) or not 0 <= self.seed < 2**63:
            raise ValueError(f"seed must be an integer in [0, 2^63), got {self.seed!r}")

    def to_dict(self) -> dict[str, Any]:
        return {
            **_kind_and_layers("noise", self.layers),
            "eps": float(self.eps),
            "seed": int(self.seed),
            "sigma": "per-token std over the hidden dimension (population)",
            "noise_keyed_by": "(seed, layer, position id)",
        }


@dataclass(frozen=True)
class PatchSpec:
    """Activation patching: h_ℓ(target prompt) at its last token ← h_ℓ(source prompt) at its last token.

    Attributes:
        layers: decoder layers (0-based) to patch.
        source_ids: the prompt the states are taken from (the parametric, no-context prompt).
        target_ids: the prompt whose last-token states are replaced (the retrieval prompt).
    """

    layers: tuple[int, ...]
    source_ids: tuple[int, ...]
    target_ids: tuple[int, ...]

    def validate(self, parts: ModelParts) -> None:
        """Check the layers against ``parts`` and that both prompts are non-empty.

        Raises:
            ValueError: no layer, a layer out of range or an empty prompt.
        """
        _check_layers(parts, self.layers, "Patching")
        if not self.source_ids or not self.target_ids:
            raise ValueError("Patching needs a non-empty source prompt and target prompt.")

    def to_dict(self) -> dict[str, Any]:
        return {
            **_kind_and_layers("patch", self.layers),
            "source_prompt_len": len(self.source_ids),
            "target_prompt_len": len(self.target_ids),
            "position": "last prompt token",
        }


def _check_layers(parts: ModelParts, layers: tuple[int, ...], what: str) -> None:
    """At least one layer, each a decoder layer of ``parts``.

    Raises:
        ValueError: no layer, or a layer out of range.
    """
    if not layers:
        raise ValueError(f"{what} needs at least one layer.")
    parts.check_layers(layers)


def _kind_and_layers(kind: str, layers: tuple[int, ...]) -> dict[str, Any]:
    """The head of an intervention's JSON form: its kind and its layers as plain ints."""
    return {"kind": kind, "layers": [int(x) for x in layers]}


@dataclass
class InterventionStats:
    """What an intervention actually did (filled while it is active).

    Attributes:
        noised_forwards: per noised layer, how many forward passes it perturbed.
        patched_sites: (row, position) replacements made, summed over layers and forwards.
    """

    noised_forwards: dict[int, int] = field(default_factory=dict)
    patched_sites: int = 0
