"""One traced forward of the retrieval path per row, shared by every detector that reads it.

The Lookback Lens (its ratio map), ReDeEP's three detectors (ECS and PKS) and CRM (h_ℓ^c, the retrieval side of
its displacement at the last prompt token) all need a forward pass over the same tokens: the retrieval prompt
followed by the retrieval answer, teacher forced (prompt + answer[:-1]). :func:`retrieval_pass` runs it once per
row — one :func:`core.model.trace.trace` with every reader any of them needs: the residual stream at every
position, the MLP outputs where the model has ReDeEP's PKS, the lookback-ratio reducer and ReDeEP's top-context
reducer — and keeps it in ``DetectorInput.cache[keys.RETRIEVAL_TRACE]``. Each detector derives its own product
from it (:func:`lookback_map_for`, :func:`redeep_trace_for`, :func:`retrieval_state`) and caches that under its
own key; :func:`release` drops the pass (``(n_layers + 1) × T × d`` floats and the MLP outputs) once a caller is
done with the row.

The pass is causal, so ReDeEP's rows (the scored window, possibly shorter than the answer) and CRM's last prompt
token read the same values as the shorter passes each of them ran before (equal up to float32 rounding of
matrix products of another shape; the tests compare them). Where the pass cannot serve a detector (an empty
answer, no context token, a model without attention weights, another k of ReDeEP's top-k %), the detector runs
its own pass as before, which raises the same error.

Not shared, because the tokens differ: the context baselines read the context text on its own, RADAR the query on
its own (no chat template), CRM's h_ℓ^0 the parametric prompt — each is its own pass.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from core.detectors import keys
from core.detectors.registry import DetectorInput
from core.engine.result import RETRIEVAL
from core.methods.internals.replay import path_sequence
from core.methods.lookback.features import LookbackMap, LookbackPlan, lookback_map, plan_map
from core.methods.redeep import DEFAULT_K_PERCENT, ReDeEPChoice, ReDeEPTrace, load_choice_for, redeep_trace
from core.methods.redeep.forward import ReDeEPPlan, from_trace, plan_trace, trace_options
from core.model.trace import ALL, Trace, trace

logger = logging.getLogger(__name__)


@dataclass
class RetrievalPass:
    """One row's shared forward of the retrieval path.

    Attributes:
        trace: the :func:`~core.model.trace.trace` over prompt + answer[:-1], every position kept.
        prompt_len: the retrieval prompt's tokens.
        lookback: the Lookback Lens' plan (its reducer ran as ``"lr"``), ``None`` when it cannot run here.
        redeep: ReDeEP's plan (its reducer ran as ``"top"``), ``None`` when it cannot run here.
    """

    trace: Trace
    prompt_len: int
    lookback: LookbackPlan | None
    redeep: ReDeEPPlan | None


def redeep_choice_hint(inp: DetectorInput) -> ReDeEPChoice | None:
    """The ReDeEP choice the caller set or the stored one (files only: no label-free default is built here)."""
    try:
        return inp.cache.get(keys.REDEEP_SETTINGS) or load_choice_for(inp.handle, inp.result.template)
    except ValueError:
        return None


def _or_none(plan, *args, **kwargs):
    try:
        return plan(*args, **kwargs)
    except ValueError:
        return None


READERS = ("lookback", "redeep", "combined")
"""Name prefixes of the detectors that read the pass beyond CRM's h^c (the combined detector reads ReDeEP's and the
Lookback Lens' features)."""


def plan(inp: DetectorInput, names: Iterable[str]) -> None:
    """Tell the row which detectors will run (``assess`` and ``evaluate`` do): when none of them reads more than
    CRM's h^c, CRM keeps its own pass over the prompt alone (shorter than prompt + answer, no attention kept)."""
    inp.cache[keys.PLANNED] = tuple(names)


def _worth_sharing(inp: DetectorInput) -> bool:
    planned = inp.cache.get(keys.PLANNED)
    return planned is None or any(name.startswith(READERS) for name in planned)


def retrieval_pass(inp: DetectorInput, *, crm_only: bool = False) -> RetrievalPass | None:
    """The row's shared pass, run on first use (``None`` when it cannot run: then each detector runs its own).

    Args:
        crm_only: the caller reads only CRM's h^c: ``None`` (no pass) when the planned detectors read nothing
            more (:func:`plan`).
    """
    if keys.RETRIEVAL_TRACE in inp.cache:
        return inp.cache[keys.RETRIEVAL_TRACE]
    if crm_only and not _worth_sharing(inp):
        return None
    handle, result = inp.handle, inp.result
    shared = None
    try:
        ids, _, prompt_len = path_sequence(handle, result, RETRIEVAL)
        lookback = _or_none(plan_map, handle, result)
        choice = redeep_choice_hint(inp)
        k_percent = choice.k_percent if choice is not None else DEFAULT_K_PERCENT
        redeep = _or_none(plan_trace, handle, result, k_percent)
        options = trace_options(redeep) if redeep is not None else {"positions": ALL}
        if lookback is not None:
            options["attention"] = options.get("attention", {}) | {"lr": lookback.reducer()}
        shared = RetrievalPass(trace(handle, [ids], **options), prompt_len, lookback, redeep)
    except ValueError as exc:
        logger.info("no shared retrieval pass for this row (each detector runs its own): %s", exc)
    inp.cache[keys.RETRIEVAL_TRACE] = shared
    return shared


def release(inp: DetectorInput) -> None:
    """Drop the row's shared pass (the products derived from it stay cached)."""
    inp.cache.pop(keys.RETRIEVAL_TRACE, None)


def lookback_map_for(inp: DetectorInput) -> LookbackMap:
    """The row's lookback map, from the shared pass (else its own traced forward)."""
    shared = retrieval_pass(inp)
    if shared is None or shared.lookback is None:
        return lookback_map(inp.handle, inp.result)
    return shared.lookback.map_from(shared.trace.attention["lr"][0])


def redeep_trace_for(inp: DetectorInput, choice: ReDeEPChoice) -> ReDeEPTrace:
    """ReDeEP's ECS (every head) and PKS (the choice's layers) of the row, from the shared pass when it ran at the
    choice's k (else its own traced forward)."""
    shared = retrieval_pass(inp)
    plan = None if shared is None else shared.redeep
    if plan is None or plan.k_percent != float(choice.k_percent):
        return redeep_trace(inp.handle, inp.result, choice.k_percent, layers=choice.layers)
    return from_trace(inp.handle, plan, shared.trace, layers=choice.layers)  # type: ignore[union-attr]


def retrieval_state(inp: DetectorInput) -> np.ndarray | None:
    """h_ℓ at the retrieval prompt's last token, ``(n_layers + 1, d)`` float32, from the shared pass (``None``
    when there is none, or when no planned detector reads more than this: see :func:`plan`)."""
    shared = retrieval_pass(inp, crm_only=True)
    if shared is None:
        return None
    return shared.trace.residual[0][:, shared.prompt_len - 1].numpy()
