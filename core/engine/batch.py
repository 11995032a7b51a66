"""Batched dual-path scoring: many (query, context) rows through the same protocol as :func:`run_dual_path`.

For a batch of B rows the cost is **one** batched greedy ``generate(output_logits=True)`` over the B
left-padded retrieval prompts and **one** batched teacher-forced forward over the B left-padded rows
``parametric prompt + answer[:-1]`` (:mod:`core.engine.generation`) — instead of B generations and B forwards.
Each row's :class:`~core.engine.result.DualPathResult` is built by the same code as the unbatched engine
(:func:`core.engine.scoring.score_paths` and :func:`core.engine.scoring.build_result`), so

    score_batch(handle, rows, s)[i]  ≈  run_dual_path(handle, *rows[i], s, free_parametric=False)

up to float tolerance (padding changes the order of floating-point reductions, ~1e-6 relative on CPU fp32).

Caveat: greedy decoding takes an argmax; when the two best candidates of a step are within float noise of each
other, the ~1e-6 differences that padding introduces can pick the other token, and that row's answer (and
therefore its Z) then differs from the unbatched run from that step on. This is rare on real models and is
not an error of either computation; per-step distributions given the same tokens agree to float tolerance
(tested).

Robustness (RePCS §V, Table IV) needs both paths' full logits, which exist only while a batch is being
scored, so the noisy scores Z_σ for the requested σ are computed here (see :mod:`core.maths.noise`)
and stored in ``result.extras["noisy_repcs"]``.

Memory. Scoring needs, per answer position, both paths' full-vocabulary distributions (the KL is a sum over
the vocabulary), so a batch holds its retrieval logits (kept by the generation) and its parametric logits
(one forward) at once: ``rows × max_new_tokens × V`` values each. Three rules keep that bounded:

* a batch is split into sub-batches of at most :func:`rows_per_batch` rows so that one path's logits take at
  most :data:`MAX_LOGITS_BYTES` (1 GiB): with the embedded model (V = 49,152, fp32) that is 5 rows at 1,024 new
  tokens, the full 8 up to 640 (each sub-batch is one generate and one forward, as any batch);
* :func:`core.engine.generation.generate_greedy` gives each row its own logits tensor without a stacked copy,
  and a row's retrieval logits are released as soon as the row is scored;
* each row is scored in slices of answer positions (:data:`SCORE_CHUNK_BYTES` of float32 logits per slice),
  so the float32 log-probabilities and KL temporaries of scoring never span the whole answer (the per-position
  results are the same: every statistic is computed position by position).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np
import torch

from core.engine.calibration_record import ModelCalibration, record_for, template_key
from core.engine.generation import (
    SCORING,
    EventCallback,
    StreamEvent,
    generate_greedy,
    teacher_forced_pass,
)
from core.engine.prepare import PreparedPrompts, prepare_prompts
from core.engine.result import PARAMETRIC, RETRIEVAL, DualPathResult, RunInternals
from core.engine.scoring import (
    NOT_GENERATED,
    Answer,
    PathScores,
    build_result,
    resolve_threshold,
    score_paths,
)
from core.engine.settings import DualPathSettings
from core.engine.threshold import Threshold
from core.maths.divergence import log_probs
from core.maths.noise import noisy_repcs_scores, row_seed
from core.model.handle import ModelHandle, check_cancelled
from core.model.progress import Progress
from core.model.recording import recording, recording_bytes

logger = logging.getLogger(__name__)

DEFAULT_BATCH_SIZE = 8
MAX_BATCH_TOKENS = 16384
"""Most padded prompt+answer tokens per batch (batch rows × widest row); longer rows get smaller batches."""
MAX_LOGITS_BYTES = 1 << 30
"""Most bytes of one path's full-vocabulary logits a batch may hold (rows × max_new_tokens × V × dtype size);
a larger batch is scored in sub-batches (:func:`rows_per_batch`). The peak of a batch is about twice this (both
paths) plus the model and one row's scoring temporaries."""
SCORE_CHUNK_BYTES = 16 << 20
"""Answer positions are scored in slices of at most this many bytes of float32 logits per path."""
_DTYPE_BYTES = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2}


def rows_per_batch(handle: ModelHandle, max_new_tokens: int, max_bytes: int | None = None) -> int:
    """The most rows one batch may hold so that one path's logits fit in ``max_bytes`` (default
    :data:`MAX_LOGITS_BYTES`; at least 1 row).

    One row keeps ``max_new_tokens × V`` logits per path in the model's dtype.
    """
    max_bytes = MAX_LOGITS_BYTES if max_bytes is None else max_bytes
    per_row = max(1, max_new_tokens) * handle.info.vocab_size * _DTYPE_BYTES.get(handle.info.dtype, 4)
    return max(1, max_bytes // per_row)


def _concat(parts: list[Any], kind: type) -> Any:
    """Concatenate per-slice :class:`PathScores` / :class:`PathStats` along the position axis."""
    values = {}
    for f in fields(kind):
        items = [getattr(p, f.name) for p in parts]
        values[f.name] = (
            _concat(items, type(items[0])) if f.name in ("retrieval", "parametric") else np.concatenate(items)
        )
    return kind(**values)


def _score_row(
    retrieval_logits: torch.Tensor, parametric_logits: torch.Tensor, answer_ids: list[int], top_k: int
) -> PathScores:
    """:func:`core.engine.scoring.score_paths` over slices of positions (see :data:`SCORE_CHUNK_BYTES`)."""
    n, vocab = retrieval_logits.shape
    step = max(1, SCORE_CHUNK_BYTES // (4 * max(1, vocab)))
    if n <= step:
        return score_paths(retrieval_logits, parametric_logits, answer_ids, top_k)
    parts = [
        score_paths(retrieval_logits[a : a + step], parametric_logits[a : a + step], answer_ids[a : a + step], top_k)
        for a in range(0, n, step)
    ]
    return _concat(parts, PathScores)


@dataclass(frozen=True)
class ScoreRequest:
    """What a scoring call is asked for, besides its rows: one object instead of a fan-out of keyword arguments.

    Attributes:
        settings: the dual-path settings.
        threshold, threshold_source: τ to apply and where it comes from (default: the τ in force for the model,
            resolved once per call by :meth:`resolved`).
        free_parametric: also generate each row's parametric answer (its prompts join the same batched
            ``generate``); scoring never needs it, display and the conflict set do.
        noise_sigmas: σ values for the RePCS Table IV robustness scores Z_σ (see :mod:`core.maths.noise`); the
            noise of a row depends only on ``noise_seed`` and the row's text, not on the batch.
        noise_seed: the seed of that noise.
        record: keep what the run's own passes read for the detectors (:class:`~core.engine.result.RunInternals`:
            the retrieval path recorded while it is generated, the parametric prompt's last state from the
            scoring pass) in each result's ``internals``, unless the batch's recordings would exceed
            :data:`MAX_RECORD_BYTES`; the scores are the same either way.
        first_token_logprob: also keep the log-probability both paths give one token at the first answer
            position, ``result.extras["first_token_logprob"] = {"token", "retrieval", "parametric"}`` (nats): the
            ablations compare a perturbed run with the clean answer's first token.
        first_token: that token (``None``: each row's own first answer token).
        calibration: the model's calibration record (:class:`~core.engine.calibration_record.ModelCalibration`),
            resolved once per call by :meth:`resolved` and handed to every result it scores (their headline and
            ``calibration_id``): nothing reads a calibration file while scoring.
    """

    settings: DualPathSettings = field(default_factory=DualPathSettings)
    threshold: Threshold | None = None
    threshold_source: str | None = None
    free_parametric: bool = False
    noise_sigmas: tuple[float, ...] = ()
    noise_seed: int = 0
    record: bool = False
    first_token_logprob: bool = False
    first_token: int | None = None
    calibration: ModelCalibration | None = None

    @classmethod
    def of(cls, settings: DualPathSettings | ScoreRequest | None = None, **options: Any) -> ScoreRequest:
        """A request from settings and keyword options (or the request itself, with ``options`` replaced)."""
        if "noise_sigmas" in options:
            options["noise_sigmas"] = tuple(float(x) for x in options["noise_sigmas"])
        if isinstance(settings, ScoreRequest):
            return replace(settings, **options) if options else settings
        return cls(settings=settings or DualPathSettings(), **options)

    def resolved(self, handle: ModelHandle) -> ScoreRequest:
        """This request with the model's calibration record (:func:`core.engine.calibration_record.record_for`:
        by the model's identity and the resolved template) and τ with its source resolved from it
        (:func:`core.engine.scoring.resolve_threshold`): once per call, before anything is scored."""
        record = self.calibration
        wanted = (handle.slug, template_key(handle, self.settings.template))
        if record is None or (record.slug, record.template) != wanted:
            record = record_for(handle, self.settings.template)
        threshold, source = resolve_threshold(handle, self.threshold, self.threshold_source, record)
        return replace(self, threshold=threshold, threshold_source=source, calibration=record)


def _score_rows(
    prepared: Sequence[PreparedPrompts],
    retrieval: list[tuple[list[int], Any, str]],
    parametric_logits: list[torch.Tensor],
    request: ScoreRequest,
) -> list[tuple[Answer, PathScores, dict[str, Any]]]:
    """Each row's scores (in slices, :func:`_score_row`) and, when asked, its noisy Z_σ; a row's retrieval
    logits are released as soon as it is scored."""
    settings = request.settings
    scored = []
    for i, p in enumerate(prepared):
        retrieval_ids, retrieval_logits, retrieval_finish = retrieval[i]
        retrieval[i] = (retrieval_ids, None, retrieval_finish)  # this row's logits are freed once it is scored
        scores = _score_row(retrieval_logits, parametric_logits[i], retrieval_ids, settings.top_k)
        extras: dict[str, Any] = {}
        if request.noise_sigmas:
            seed = row_seed(request.noise_seed, p.query, p.context)
            extras["noisy_repcs"] = {
                "sigma": [float(s) for s in request.noise_sigmas],
                "z": noisy_repcs_scores(
                    retrieval_logits, parametric_logits[i], settings.score_window, request.noise_sigmas, seed
                ),
                "seed": seed,
                "space": "logits",
            }
        if request.first_token_logprob and len(retrieval_ids):
            extras["first_token_logprob"] = first_token_logprobs(
                retrieval_logits[:1],
                parametric_logits[i][:1],
                retrieval_ids[0] if request.first_token is None else request.first_token,
            )
        scored.append((Answer(retrieval_ids, retrieval_finish), scores, extras))
        del retrieval_logits
    return scored


def first_token_logprobs(retrieval: torch.Tensor, parametric: torch.Tensor, token: int) -> dict[str, float]:
    """log P(``token``) under each path's distribution of the first answer position (``(1, V)`` logits each), nats,
    in the float32 log-space every score uses."""
    lp_retrieval = log_probs(retrieval)
    lp_parametric = log_probs(parametric.to(retrieval.device))
    token = int(token)
    return {
        "token": token,
        "retrieval": float(lp_retrieval[0, token].item()),
        "parametric": float(lp_parametric[0, token].item()),
    }


def score_prepared(
    handle: ModelHandle,
    prepared: Sequence[PreparedPrompts],
    request: ScoreRequest,
    *,
    on_event: EventCallback | None = None,
) -> list[DualPathResult]:
    """The engine's one core: B validated rows through one batched generate and one batched teacher-forced
    forward, scored row by row in memory-bounded slices (see the module docstring).

    A single row is a batch of one: :func:`core.engine.dual_path.run_dual_path` streams it with ``on_event``
    (its paths are then named ``retrieval`` / ``parametric``; a larger batch's rows ``row<i>``).

    Args:
        prepared: the rows' prompts (:func:`core.engine.prepare.prepare_prompts`); at most
            :func:`rows_per_batch` of them for the logits to stay within :data:`MAX_LOGITS_BYTES`.
        request: what to compute; its τ should be resolved (:meth:`ScoreRequest.resolved`).
        on_event: called after every generated token, then once when scoring starts (``path == "scoring"``).

    Returns:
        One :class:`DualPathResult` per row; ``timings`` hold the batch's times divided by its size and
        ``batch_size``.
    """
    settings, b = request.settings, len(prepared)
    if b == 0:
        return []
    prompts = [p.retrieval.ids for p in prepared]
    paths = [RETRIEVAL] if b == 1 else None
    if request.free_parametric:
        prompts += [p.parametric.ids for p in prepared]
        paths = [RETRIEVAL, PARAMETRIC] if b == 1 else None
    t0 = time.perf_counter()
    record = request.record and _can_record(handle, prepared, settings)
    rows = range(b) if record else ()
    with handle.session():  # the batch's generate and forward in one hold of the model: no other run interleaves
        with _recorder(handle, prompts, rows, settings) if record else nullcontext([]) as recs:
            generated = generate_greedy(handle, prompts, settings, paths=paths, on_event=on_event)
        for rec, i in zip(recs, rows, strict=True):
            rec.set_fed(prompts[i], generated[i][0])
        retrieval = generated[:b]
        if request.free_parametric:  # the free parametric answers' own logits are never scored: keep their ids
            parametric = [Answer(list(ids), finish) for ids, _, finish in generated[b:]]
        else:
            parametric = [NOT_GENERATED] * b
        del generated
        t1 = time.perf_counter()
        if on_event is not None:
            on_event(StreamEvent(SCORING, "", 0, 1, False))
        parametric_logits, states = teacher_forced_pass(
            handle, [p.parametric.ids for p in prepared], [r[0] for r in retrieval], prompt_states=record
        )
    scored = _score_rows(prepared, retrieval, parametric_logits, request)
    t2 = time.perf_counter()
    del retrieval, parametric_logits
    timings = {"generate_s": (t1 - t0) / b, "score_s": (t2 - t1) / b, "total_s": (t2 - t0) / b, "batch_size": float(b)}
    out = []
    for p, (answer, scores, extras), free in zip(prepared, scored, parametric, strict=True):
        res = build_result(
            handle,
            p,
            settings,
            scores,
            retrieval=answer,
            parametric=free,
            threshold=request.threshold,
            threshold_source=request.threshold_source,
            timings=dict(timings),
            calibration=request.calibration,
        )
        res.extras.update(extras)
        out.append(res)
    if record:
        for i, res in enumerate(out):
            res.internals = RunInternals(recs[i], states[i].numpy() if states is not None else None)
    return out


MAX_RECORD_BYTES = 2**30
"""What the recordings of one batch may hold at most (:func:`core.model.recording.recording_bytes`, estimated
before the run): a batch whose rows would hold more is not recorded (its detectors run their own passes)."""


def _recorder(handle: ModelHandle, prompts: list[list[int]], rows: Sequence[int], settings: DualPathSettings):
    """The recording of the batch's ``rows`` (left-padded to the widest prompt; a row stops at its end token)."""
    width = max(len(p) for p in prompts)
    stop = () if settings.force_length else handle.eos_token_ids
    pads, lens = [width - len(prompts[i]) for i in rows], [len(prompts[i]) for i in rows]
    return recording(handle, rows, pads, lens, stop_ids=stop)


def _can_record(handle: ModelHandle, prepared: Sequence[PreparedPrompts], settings: DualPathSettings) -> bool:
    need = sum(recording_bytes(handle, len(p.retrieval.ids), settings.max_new_tokens) for p in prepared)
    if need > MAX_RECORD_BYTES:
        logger.info("not recording this batch's generation: about %d MiB > %d MiB", need >> 20, MAX_RECORD_BYTES >> 20)
        return False
    return True


def _score_capped(
    handle: ModelHandle, prepared: Sequence[PreparedPrompts], request: ScoreRequest
) -> list[DualPathResult]:
    """:func:`score_prepared` in consecutive sub-batches of at most :func:`rows_per_batch` rows."""
    cap = rows_per_batch(handle, request.settings.max_new_tokens)
    if len(prepared) > cap:
        logger.info("batch of %d rows scored in sub-batches of %d (logit memory cap)", len(prepared), cap)
    out: list[DualPathResult] = []
    for start in range(0, len(prepared), cap):
        out += score_prepared(handle, prepared[start : start + cap], request)
    return out


def score_batch(
    handle: ModelHandle,
    items: Sequence[tuple[str, str]],
    request: ScoreRequest | DualPathSettings | None = None,
    **options: Any,
) -> list[DualPathResult]:
    """Score one batch of (query, context) rows: one batched generate + one batched teacher-forced forward.

    Args:
        items: ``(query, context)`` pairs, validated like :func:`core.engine.prepare.prepare_prompts` (a bad row
            raises ``ValueError`` before any model call).
        request: a :class:`ScoreRequest`, or the settings of one built from ``options`` (the request's fields:
            ``threshold``, ``threshold_source``, ``free_parametric``, ``noise_sigmas``, ``noise_seed``).

    Returns:
        One :class:`DualPathResult` per item, in order. ``timings`` hold the batch's times divided by its size
        (``batch_size`` says how many rows shared them). More rows than :func:`rows_per_batch` allows are
        scored in consecutive sub-batches (each one generate and one forward).
    """
    request = ScoreRequest.of(request, **options)
    if not items:
        return []
    prepared = [prepare_prompts(handle, q, c, request.settings) for q, c in items]
    return _score_capped(handle, prepared, request.resolved(handle))


def plan_batches(
    lengths: Sequence[int], batch_size: int, max_new_tokens: int, max_batch_tokens: int = MAX_BATCH_TOKENS
) -> list[list[int]]:
    """Group row indices into batches of similar prompt length (less padding), at most ``batch_size`` rows and
    at most ``max_batch_tokens`` padded tokens each. Rows are taken in order of length; every index appears
    exactly once."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        width = max([lengths[j] for j in current] + [lengths[i]]) + max_new_tokens
        if current and (len(current) >= batch_size or (len(current) + 1) * width > max_batch_tokens):
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


def score_rows(
    handle: ModelHandle,
    items: Sequence[tuple[str, str]],
    request: ScoreRequest | DualPathSettings | None = None,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: Progress | None = None,
    should_stop: Callable[[], bool] | None = None,
    **options: Any,
) -> list[DualPathResult | None]:
    """Score many rows in length-sorted batches (see :func:`plan_batches`); results come back in input order.

    ``request`` and ``options`` as for :func:`score_batch`. Every row is validated before the first batch runs.
    ``progress(done, total)`` is called after each batch; when ``should_stop()`` turns true the remaining rows
    are skipped and come back as ``None``.
    """
    request = ScoreRequest.of(request, **options)
    prepared = [prepare_prompts(handle, q, c, request.settings) for q, c in items]
    request = request.resolved(handle)
    out: list[DualPathResult | None] = [None] * len(items)
    done = 0
    lengths = [len(p.retrieval.ids) for p in prepared]
    for batch in plan_batches(lengths, batch_size, request.settings.max_new_tokens):
        if should_stop is not None and should_stop():
            break
        check_cancelled()  # a cancelled run (closed tab, newer run of the session) ends between batches
        for i, res in zip(batch, _score_capped(handle, [prepared[i] for i in batch], request)):
            out[i] = res
        done += len(batch)
        if progress is not None:
            progress(done, len(items))
    return out
