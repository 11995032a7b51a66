"""ReDeEP detectors (Sun et al., ICLR 2025, arXiv 2410.11414): ECS of the copying heads, PKS of the knowledge
layers, and their fitted regression.

One traced forward of the retrieval path per row, shared by the three detectors (``DetectorInput.cache[DETAILS_KEY]``)
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

from collections.abc import Callable
from typing import Any

import numpy as np

from core.detectors.keys import REDEEP_DETAILS, REDEEP_SETTINGS
from core.detectors.registry import (
    CONTEXT_RELIANCE,
    GROUNDED_HIGH,
    MEMORIZED_HIGH,
    PARAMETRIC_KNOWLEDGE,
    RETRIEVAL_TRACE,
    Details,
    Detector,
    DetectorInput,
    DetectorThreshold,
    ThresholdRule,
    declare,
)
from core.detectors.shared import redeep_trace_for
from core.detectors.thresholds import DEFAULT_ALPHA, alpha_threshold, bundled_calibration
from core.methods.redeep import ReDeEPChoice, ReDeEPView, choice_for, is_fitted, load_table_for
from core.methods.redeep.analysis import view_of
from core.methods.redeep.choice import REDEEP_CHOICE

SETTINGS = REDEEP_SETTINGS
"""``DetectorInput.cache`` key: a :class:`~core.methods.redeep.ReDeEPChoice` to use instead of the stored one."""
DETAILS_KEY = REDEEP_DETAILS
"""``DetectorInput.cache`` key: the row's :class:`~core.methods.redeep.ReDeEPView`."""
SOURCE = "ReDeEP (Sun et al., ICLR 2025, arXiv 2410.11414)"


def view_for(inp: DetectorInput) -> ReDeEPView:
    """The row's ReDeEP decomposition (from the row's shared traced forward, cached per row)."""
    view = inp.cache.get(DETAILS_KEY)
    if view is None:
        choice: ReDeEPChoice = inp.cache.get(SETTINGS) or choice_for(inp.handle, inp.result.template)
        view = view_of(redeep_trace_for(inp, choice), choice, inp.result)
        inp.cache[DETAILS_KEY] = view
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


def table_ecs(choice: ReDeEPChoice, ecs: np.ndarray, pks: np.ndarray) -> np.ndarray:
    """``redeep_ecs`` of every row of a calibration table (row means ``(n, L, H)`` / ``(n, L)``): the chosen heads'
    mean ECS."""
    heads_l, heads_h = [h[0] for h in choice.heads], [h[1] for h in choice.heads]
    return ecs[:, heads_l, heads_h].mean(-1)


def table_pks(choice: ReDeEPChoice, ecs: np.ndarray, pks: np.ndarray) -> np.ndarray:
    """``redeep_pks`` of every row of a calibration table: the chosen layers' mean PKS."""
    return pks[:, choice.layers].mean(-1)


def table_score(choice: ReDeEPChoice, ecs: np.ndarray, pks: np.ndarray) -> np.ndarray:
    """``redeep`` of every row of a calibration table: α·PKS − β·ECS."""
    return np.array([choice.score(e, p) for e, p in zip(ecs, pks)])


TableScores = Callable[[ReDeEPChoice, np.ndarray, np.ndarray], np.ndarray]


def on_calibration_table(scores_of: TableScores) -> ThresholdRule:
    """A ReDeEP detector's threshold rule: RePCS Algorithm 1 (α = 5 %) over the read rows of the calibration table
    the choice was made on, each row scored by ``scores_of`` (none for a label-free choice)."""

    def rule(detector: Detector, inp: DetectorInput) -> DetectorThreshold | None:
        choice = inp.cache.get(SETTINGS) or choice_for(inp.handle, inp.result.template)
        table = load_table_for(inp.handle, inp.result.template) if is_fitted(choice) else None
        if table is None:
            return None
        clean = table.labels == 0
        value = alpha_threshold(scores_of(choice, table.ecs[clean], table.pks[clean]), detector.higher_means)
        return DetectorThreshold(
            value,
            f"RePCS Algorithm 1 (α = {DEFAULT_ALPHA:g}) over the {int(clean.sum())} read calibration rows the heads "
            "and layers were chosen on (in-sample)",
        )

    return rule


def _details(view: ReDeEPView) -> dict[str, Any]:
    return details(view)


DETAILS = Details(
    DETAILS_KEY,
    {
        "score": "α·PKS − β·ECS (null without PKS)",
        "ecs": "the chosen heads' mean ECS",
        "pks": "the chosen layers' mean PKS (nats; null without PKS)",
        "heads": "the copying heads [layer, head]",
        "layers": "the knowledge layers",
        "alpha": "α",
        "beta": "β",
        "fitted": "whether the choice was fitted on labeled rows",
        "choice": "how the heads and layers were chosen",
        "pks_refusal": "why this model has no PKS (null when it has)",
    },
    to_json=_details,
)

declare(
    {
        "name": "redeep",
        "label": "ReDeEP: α·PKS − β·ECS over the chosen layers and heads",
        "higher_means": MEMORIZED_HIGH,
        "score": score_redeep,
        "source": f"{SOURCE}, eq. 7; heads/layers by Pearson on assets/calibration/, α, β by logistic regression",
        "short": "ReDeEP",
        "thresholds": (on_calibration_table(table_score), bundled_calibration),
    },
    {
        "name": "redeep_ecs",
        "label": "ReDeEP ECS: copying heads' agreement with the context they attend to",
        "higher_means": GROUNDED_HIGH,
        "score": score_ecs,
        "source": f"{SOURCE}, eq. 3 (top-10 % attended context tokens), mean over the chosen heads and answer tokens",
        "short": "ReDeEP ECS",
        "thresholds": (on_calibration_table(table_ecs), bundled_calibration),
    },
    {
        "name": "redeep_pks",
        "label": "ReDeEP PKS: JSD of the logit lens before/after the knowledge MLPs",
        "higher_means": MEMORIZED_HIGH,
        "score": score_pks,
        "source": f"{SOURCE}, eq. 5 (JSD in nats, a sum over the vocabulary), mean over the chosen layers and tokens",
        "short": "ReDeEP PKS",
        "group": PARAMETRIC_KNOWLEDGE,
        "thresholds": (on_calibration_table(table_pks), bundled_calibration),
    },
    cost="forward",
    group=CONTEXT_RELIANCE,
    reads=frozenset({RETRIEVAL_TRACE}),
    artifact=REDEEP_CHOICE,
    details=DETAILS,
    page="Layer trajectories",
)
