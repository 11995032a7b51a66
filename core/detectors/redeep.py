"""ReDeEP detectors (Sun et al., ICLR 2025, arXiv 2410.11414): ECS of the copying heads, PKS of the knowledge
layers, and their fitted regression.

One traced forward of the retrieval path per row, shared by the three detectors (``DetectorInput.cache[DETAILS]``)
and with the Lookback Lens and CRM (:mod:`core.detectors.shared`). The heads, layers and α, β are the model's
stored choice (``assets/redeep/`` for the embedded model; ``$READ_OR_RECALL_REDEEP_CHOICE`` names a user's own; a
choice put in ``inp.cache[SETTINGS]`` wins), else a label-free default (OV-chosen heads, every layer, α = β = 1).

* ``redeep`` — ``α·Σ_{ℓ∈F} PKS^ℓ − β·Σ_{(ℓ,h)∈A} ECS^{ℓ,h}`` (token means): higher = recalled (context reliance);
* ``redeep_ecs`` — the chosen heads' mean ECS: higher = read (context reliance);
* ``redeep_pks`` — the chosen layers' mean PKS (nats): higher = recalled (parametric knowledge).

Models without a state between attention and MLP (parallel residual, OPT) have no PKS: ``redeep_pks`` and
``redeep`` raise with the reason; ``redeep_ecs`` still runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from core.detectors.keys import REDEEP_DETAILS, REDEEP_SETTINGS
from core.detectors.registry import (
    CONTEXT_RELIANCE,
    GROUNDED_HIGH,
    MEMORIZED_HIGH,
    PARAMETRIC_KNOWLEDGE,
    Detector,
    DetectorInput,
    register,
)
from core.detectors.shared import redeep_trace_for
from core.methods.redeep import ReDeEPChoice, ReDeEPView, choice_for, is_fitted, load_table_for
from core.methods.redeep.analysis import view_of

SETTINGS = REDEEP_SETTINGS
"""``DetectorInput.cache`` key: a :class:`~core.methods.redeep.ReDeEPChoice` to use instead of the stored one."""
DETAILS = REDEEP_DETAILS
"""``DetectorInput.cache`` key: the row's :class:`~core.methods.redeep.ReDeEPView`."""
SOURCE = "ReDeEP (Sun et al., ICLR 2025, arXiv 2410.11414)"


def view_for(inp: DetectorInput) -> ReDeEPView:
    """The row's ReDeEP decomposition (from the row's shared traced forward, cached per row)."""
    view = inp.cache.get(DETAILS)
    if view is None:
        choice: ReDeEPChoice = inp.cache.get(SETTINGS) or choice_for(inp.handle, inp.result.template)
        view = view_of(redeep_trace_for(inp, choice), choice, inp.result)
        inp.cache[DETAILS] = view
    return view


def _no_pks(view: ReDeEPView) -> ValueError:
    return ValueError(f"ReDeEP's PKS is unavailable for this model: {view.trace.pks_refusal}")


def score_redeep(inp: DetectorInput) -> float:
    view = view_for(inp)
    if view.score is None:
        raise _no_pks(view)
    return float(view.score)


def score_ecs(inp: DetectorInput) -> float:
    view = view_for(inp)
    if not view.choice.heads:
        raise ValueError("the ReDeEP choice has no copying head")
    return float(np.mean(view.ecs))


def score_pks(inp: DetectorInput) -> float:
    view = view_for(inp)
    if view.pks is None:
        raise _no_pks(view)
    if not view.choice.layers:
        raise ValueError("the ReDeEP choice has no knowledge layer")
    return float(np.mean(view.pks))


def details(view: ReDeEPView) -> dict[str, Any]:
    """JSON-ready summary of a row's ReDeEP decomposition."""
    c = view.choice
    return {
        "score": view.score,
        "ecs": float(np.mean(view.ecs)),
        "pks": None if view.pks is None else float(np.mean(view.pks)),
        "heads": c.heads,
        "layers": c.layers,
        "alpha": c.alpha,
        "beta": c.beta,
        "fitted": is_fitted(c),
        "choice": c.describe(),
        "pks_refusal": view.trace.pks_refusal,
    }


def calibration_scores(name: str, choice: ReDeEPChoice, ecs: np.ndarray, pks: np.ndarray) -> np.ndarray:
    """Detector ``name``'s score of every row of a calibration table (row means ``(n, L, H)`` / ``(n, L)``)."""
    heads_l, heads_h = [h[0] for h in choice.heads], [h[1] for h in choice.heads]
    if name == "redeep_ecs":
        return ecs[:, heads_l, heads_h].mean(-1)
    if name == "redeep_pks":
        return pks[:, choice.layers].mean(-1)
    return np.array([choice.score(e, p) for e, p in zip(ecs, pks)])


@dataclass(frozen=True)
class ReDeEPDetector(Detector):
    """A ReDeEP detector with its own threshold for the agreement view: RePCS Algorithm 1 (α = 5 %) over the
    read rows of the calibration table the choice was made on."""

    def threshold(self, inp: DetectorInput) -> tuple[float, str] | None:
        from core.detectors.agreement import DEFAULT_ALPHA, alpha_threshold

        choice = inp.cache.get(SETTINGS) or choice_for(inp.handle, inp.result.template)
        table = load_table_for(inp.handle, inp.result.template) if is_fitted(choice) else None
        if table is None:
            return None
        clean = table.labels == 0
        scores = calibration_scores(self.name, choice, table.ecs[clean], table.pks[clean])
        value = alpha_threshold(scores, self.higher_means, DEFAULT_ALPHA)
        return value, (
            f"RePCS Algorithm 1 (α = {DEFAULT_ALPHA:g}) over the {int(clean.sum())} read calibration rows the heads "
            "and layers were chosen on (in-sample)"
        )


DETECTORS = (
    (
        "redeep",
        "ReDeEP: α·PKS − β·ECS over the chosen layers and heads",
        MEMORIZED_HIGH,
        score_redeep,
        "eq. 7; heads/layers by Pearson on assets/calibration/, α, β by logistic regression",
        CONTEXT_RELIANCE,
    ),
    (
        "redeep_ecs",
        "ReDeEP ECS: copying heads' agreement with the context they attend to",
        GROUNDED_HIGH,
        score_ecs,
        "eq. 3 (top-10 % attended context tokens), mean over the chosen heads and answer tokens",
        CONTEXT_RELIANCE,
    ),
    (
        "redeep_pks",
        "ReDeEP PKS: JSD of the logit lens before/after the knowledge MLPs",
        MEMORIZED_HIGH,
        score_pks,
        "eq. 5 (JSD in nats, a sum over the vocabulary), mean over the chosen layers and tokens",
        PARAMETRIC_KNOWLEDGE,
    ),
)
"""(name, label, higher means, score, where in the paper, group) of the three detectors."""

for _name, _label, _higher, _score, _where, _group in DETECTORS:
    register(
        ReDeEPDetector(
            name=_name,
            label=_label,
            higher_means=_higher,
            score=_score,
            cost="forward",
            source=f"{SOURCE}, {_where}",
            group=_group,
        )
    )
