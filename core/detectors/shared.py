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

When the run was made with ``record=True`` (the Dual Path page, ``run --all-detectors``), the pass is not run
at all: it is read from the run's own generation (:mod:`core.model.recording`), whose prefill and decode steps
computed the same values over the same tokens (to float32 rounding), and CRM's h_ℓ^0 comes from the run's
teacher-forced scoring pass (:func:`parametric_state`). :func:`release` drops both once the row is done.

Which detectors read what is part of their declarations (``Detector.reads``: the retrieval trace, the prompt
states, the context text, the query text); :func:`plan` collects it for the row, so no list of names lives here.

The two texts read on their own — the context text (the context baselines: PPL, zlib, Min-K%, Min-K%++) and the
query's RADAR prompt — share no token with those paths, but when the planned detectors read both,
:func:`text_pass` runs them as the two rows of **one** forward (right-padded, no mask: a causal model's tokens
never see the padding after them, so each row reads what it reads alone, to float32 rounding) instead of two:
on a CPU a forward over a short text costs mostly the reading of the weights, paid once here.

Not shared otherwise, because the tokens differ: the context baselines read the context text on its own, RADAR
the query on its own (no chat template) — their own passes when only one of them is planned; so is CRM's h_ℓ^0
(the parametric prompt) of a run that recorded nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import torch

from core.detectors import keys
from core.detectors.registry import (
    CONTEXT_TEXT,
    QUERY_TEXT,
    RETRIEVAL_TRACE,
    RUN_READS,
    Detector,
    DetectorInput,
    get,
)
from core.engine.result import RETRIEVAL
from core.methods.baselines import context_ids, stats_from_logits
from core.methods.internals.replay import path_sequence
from core.methods.lookback.features import LookbackMap, LookbackPlan, lookback_map, plan_map
from core.methods.radar import encode_radar_prompt, feature_table_for, radar_prompt
from core.methods.radar.trace import HEAD_ENTROPY, check_layers, head_entropy_reducer, lens_rows, trace_from
from core.methods.redeep import DEFAULT_K_PERCENT, ReDeEPChoice, ReDeEPTrace, load_choice_for, redeep_trace
from core.methods.redeep.forward import ReDeEPPlan, from_trace, plan_trace, trace_options
from core.model.lens import lens_logits
from core.model.parts import model_parts
from core.model.recording import Recording
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


def _reads(detectors: Iterable[str | Detector]) -> frozenset[str]:
    """What the detectors read beyond the result, from their declarations (``Detector.reads``); a name no
    detector has reads nothing."""
    found: set[str] = set()
    for d in detectors:
        detector = get(d) if isinstance(d, str) else d
        if detector is not None:
            found |= detector.reads
    return frozenset(found)


def reads_the_run(detectors: Iterable[str | Detector]) -> bool:
    """Whether any of ``detectors`` (names or declarations) reads what a recorded run keeps
    (:data:`~core.detectors.registry.RUN_READS`: the retrieval trace or CRM's prompt states); a caller then records
    the run."""
    return bool(_reads(detectors) & RUN_READS)


def plan(inp: DetectorInput, detectors: Iterable[str | Detector]) -> None:
    """Tell the row which detectors will run (``assess`` and ``evaluate`` do): what they read, from their
    declarations. When none of them reads the retrieval trace beyond CRM's h^c, CRM keeps its own pass over the
    prompt alone (shorter than prompt + answer, no attention kept); the texts pass runs only when both texts are
    read."""
    inp.cache[keys.PLANNED] = _reads(detectors)


def _worth_sharing(inp: DetectorInput) -> bool:
    planned = inp.cache.get(keys.PLANNED)
    return planned is None or RETRIEVAL_TRACE in planned


def retrieval_pass(inp: DetectorInput, *, crm_only: bool = False) -> RetrievalPass | None:
    """The row's shared pass, run on first use (``None`` when it cannot run: then each detector runs its own).

    Args:
        crm_only: the caller reads only CRM's h^c: ``None`` (no pass) when the planned detectors read nothing
            more (:func:`plan`).
    """
    if keys.RETRIEVAL_TRACE in inp.cache:
        return inp.cache[keys.RETRIEVAL_TRACE]
    recorded = _recorded(inp)
    if crm_only and recorded is None and not _worth_sharing(inp):
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
        shared = RetrievalPass(_traced(inp, recorded, ids, options), prompt_len, lookback, redeep)
    except ValueError as exc:
        logger.info("no shared retrieval pass for this row (each detector runs its own): %s", exc)
    inp.cache[keys.RETRIEVAL_TRACE] = shared
    return shared


def _recorded(inp: DetectorInput) -> Recording | None:
    """The retrieval path as the run recorded it while generating (``run_dual_path(…, record=True)``), if usable."""
    internals = inp.result.internals
    recorded = internals.retrieval if internals is not None else None
    return recorded if recorded is not None and recorded.failed is None else None


def _traced(inp: DetectorInput, recorded: Recording | None, ids: list[int], options: dict) -> Trace:
    """The shared pass: read from the run's recording of its generation when it has one (no forward), else one
    traced forward."""
    if recorded is not None:
        try:
            return recorded.trace(ids, **options)
        except ValueError as exc:
            logger.info("the run's recording cannot serve this row (one traced forward instead): %s", exc)
    return trace(inp.handle, [ids], **options)


def parametric_state(inp: DetectorInput) -> np.ndarray | None:
    """h_ℓ at the parametric prompt's last token, ``(n_layers + 1, d)`` float32, as the run's scoring pass kept it
    (``None`` when the run did not record it)."""
    internals = inp.result.internals
    return None if internals is None else internals.parametric_state


def text_pass(inp: DetectorInput) -> None:
    """The context text and the query's RADAR prompt in one forward, when the planned detectors read both (see the
    module docstring): caches the context's token statistics (``keys.CONTEXT_TOKENS``) and RADAR's trace
    (``keys.RADAR_TRACE``). Runs at most once per row; otherwise (one of them not planned, no RADAR classifier
    for this model yet, a text that cannot be scored) it does nothing and each detector runs its own pass, which
    raises its own error."""
    if keys.TEXT_PASS in inp.cache:
        return
    inp.cache[keys.TEXT_PASS] = True
    planned = inp.cache.get(keys.PLANNED) or frozenset()
    if not {CONTEXT_TEXT, QUERY_TEXT} <= planned:
        return
    if keys.CONTEXT_TOKENS in inp.cache or keys.RADAR_DETAILS in inp.cache:
        return
    handle, result = inp.handle, inp.result
    try:
        if feature_table_for(handle, compute=False) is None:
            return
        context = context_ids(handle, result.context)
        text = radar_prompt(result.query)
        query = encode_radar_prompt(handle, text)
        check_layers(handle)
        reducers = {HEAD_ENTROPY: [None, head_entropy_reducer]}  # the context's weights are not read
        t = trace(handle, [context, query], positions=ALL, attention=reducers, right_pad=True)
        param = next(handle.model.parameters())
        rows = torch.cat([t.residual[0][-1][:-1], lens_rows(t, 1)])  # the context's logits, RADAR's logit lens
        with handle.session():
            logits = lens_logits(model_parts(handle), rows.to(device=param.device, dtype=param.dtype))
        inp.cache[keys.CONTEXT_TOKENS] = stats_from_logits(logits[: len(context) - 1], context)
        inp.cache[keys.RADAR_TRACE] = trace_from(handle, text, query, t, 1, lens_logits_rows=logits[len(context) - 1 :])
    except ValueError as exc:
        logger.info("no shared texts pass for this row (each detector runs its own): %s", exc)


def release(inp: DetectorInput) -> None:
    """Drop the row's shared pass and the run's recorded internals (the products derived from them stay cached)."""
    inp.cache.pop(keys.RETRIEVAL_TRACE, None)
    inp.result.internals = None


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
