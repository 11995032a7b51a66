"""The Ablations page's controls: which layers to perturb, the noise scale and seed, and the size of a grid.

Every control is persistent (:mod:`components.controls`), so the choice survives page switches. Layer
numbers are decoder layers ``0 … L−1`` (:func:`core.methods.ablation.layer_preset`,
:func:`core.methods.ablation.parse_layers`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import streamlit as st

from components import keys, state
from components.controls import choice, number, several
from components.text import plain_message
from core.methods import ablation
from core.methods.ablation import NoiseSpec, format_layers, layer_preset, parse_layers
from core.public import current_policy

PRESET_LABELS = {
    "early": "Early third",
    "middle": "Middle third",
    "late": "Late third",
    "control": "CRM's early-control block (layers 0–7)",
    "all": "All layers",
    "flagged": "Flagged by Layer trajectories (CRM rule)",
}
EPS_CHOICES = (0.0, 0.02, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0)
DEFAULT_PRESET = "late"
DEFAULT_EPS = 0.05
DEFAULT_GRID = [0.0, 0.02, 0.05, 0.1, 0.25]
"""Defaults with a graded effect on the embedded model (France example, 24 tokens, seed 0; `python -m core
ablate --layers late --grid 0.02,0.05,0.1,0.25`): Z 3.66 clean → 4.13, 9.48, 19.1, then 69.0 at ε = 0.25 where
the answer is gibberish (flagged). The middle third changes the answer already at ε = 0.05; docs/ablations.md."""


class Choice(NamedTuple):
    """What the experiments perturb: decoder layers, the noise scale ε and the seed."""

    layers: list[int]
    eps: float
    seed: int

    def noise(self) -> NoiseSpec:
        """Noise at ε with this seed on these layers (CRM §4.4)."""
        return NoiseSpec(tuple(self.layers), self.eps, self.seed)


Chosen = tuple[list[int], str]
"""The chosen decoder layers and a short description of them (``"block 4–8"``)."""


def _preset(n_layers: int, flagged: list[int] | None) -> Chosen:
    """A named block (thirds, CRM's control block, all, or the layers the CRM rule flags for this run)."""
    presets = {p: label for p, label in PRESET_LABELS.items() if p != "flagged" or flagged}
    preset = choice(st.selectbox, "Preset", keys.ABLATE_PRESET, presets, DEFAULT_PRESET)
    if flagged is None:
        st.caption("No CRM basis is calibrated for this model and template, so no layers are flagged to offer.")
    elif not flagged:
        st.caption("The CRM rule flags no layer for this run (every LTS_ℓ within 2σ of calibration).")
    layers = list(flagged or []) if preset == "flagged" else layer_preset(preset, n_layers)
    return layers, f"{PRESET_LABELS[preset]}: layers {format_layers(layers)}"


def _block(n_layers: int, flagged: list[int] | None) -> Chosen:
    """A contiguous block of layers (a range slider; the middle third at first)."""
    block = state.stored(keys.ABLATE_BLOCK)
    if not (isinstance(block, (list, tuple)) and len(block) == 2 and 0 <= block[0] <= block[1] < n_layers):
        mid = layer_preset("middle", n_layers)
        state.set_stored(keys.ABLATE_BLOCK, (mid[0], mid[-1]))
    lo, hi = number("Block of layers", keys.ABLATE_BLOCK, (0, 0), (0, n_layers - 1), widget=st.slider)
    layers = list(range(int(lo), int(hi) + 1))
    return layers, f"block {format_layers(layers)}"


def _single(n_layers: int, flagged: list[int] | None) -> Chosen:
    """One layer (the middle one at first)."""
    single = state.stored(keys.ABLATE_SINGLE)
    if not isinstance(single, int) or not 0 <= single < n_layers:
        state.set_stored(keys.ABLATE_SINGLE, n_layers // 2)
    layer = int(number("Layer", keys.ABLATE_SINGLE, 0, (0, n_layers - 1), widget=st.slider))
    return [layer], f"layer {layer}"


def _custom(n_layers: int, flagged: list[int] | None) -> Chosen:
    """A typed list of numbers, ranges and presets (no layers, after an error box, when it does not parse)."""
    text = state.persistent(
        st.text_input, "Layers", keys.ABLATE_CUSTOM, "4-8", help="Numbers, ranges and presets: e.g. 2,5-7 or early,20"
    )
    try:
        layers = parse_layers(text, n_layers)
    except ValueError as exc:
        st.error(plain_message(str(exc)))
        return [], "no valid layers"
    return layers, f"layers {format_layers(layers)}"


MODES: dict[str, Callable[[int, list[int] | None], Chosen]] = {
    "Preset": _preset,
    "Contiguous block": _block,
    "Single layer": _single,
    "Custom list": _custom,
}
"""How the layers are chosen → the control that chooses them."""


def layer_choice(n_layers: int, flagged: list[int] | None) -> Chosen:
    """The mode (preset / block / single / custom) and the layers it selects.

    Args:
        n_layers: the model's decoder layers.
        flagged: the layers the CRM rule flags for this run; ``None`` without a CRM basis.
    """
    mode = choice(st.radio, "Choose layers by", keys.ABLATE_MODE, list(MODES), horizontal=True)
    return MODES[mode](n_layers, flagged)


def noise_controls() -> tuple[float, int]:
    """The noise scale ε and the seed, side by side; returns ``(ε, seed)``."""
    left, right = st.columns([3, 1])
    with left:
        eps = number(
            "Noise scale ε",
            keys.ABLATE_EPS,
            DEFAULT_EPS,
            (0.0, 1.0, 0.01),
            widget=st.slider,
            help="h′ = h + ε·σ(h)·N(0, 1): ε is the noise size relative to each token's activation spread.",
        )
    with right:
        seed = number("Seed", keys.ABLATE_SEED, 0, (0, 2**31 - 1, 1))
    return float(eps), int(seed)


def eps_grid() -> list[float]:
    """The ε values of a dose–response grid."""
    return several("ε grid", keys.ABLATE_GRID, EPS_CHOICES, DEFAULT_GRID)


def seeds(label: str, name: str, default: int, most: int, *, per_layer_of: int | None = None) -> list[int]:
    """How many seeds a grid runs per condition: consecutive seeds from the seed chosen above.

    Args:
        per_layer_of: for a single-layer sweep, the model's layer count: in public mode layers × seeds stays
            within the sweep cap (:mod:`core.public`); ``[]`` (after a note) when even one seed does not fit.
    """
    if per_layer_of is not None:
        policy = current_policy()
        most = policy.sweep_seeds(per_layer_of, most)
        if most < 1:
            st.warning(
                f"This public app sweeps at most {policy.caps.sweep_layers} layer runs; this model has "
                f"{per_layer_of} layers. Use the noise or dose–response experiments on a block instead."
            )
            return []
        default = min(default, most)
    n_seeds = int(number(label, name, default, (1, most)))
    seed0 = int(state.stored(keys.ABLATE_SEED, 0) or 0)
    return list(range(seed0, seed0 + n_seeds))


def tokens_per_run(name: str) -> int:
    """The answer length of every scoring run of a grid."""
    most = current_policy().limit("max_new_tokens", 128)
    return int(number("Answer tokens per run", name, min(ablation.SWEEP_MAX_NEW_TOKENS, most), (1, most)))
