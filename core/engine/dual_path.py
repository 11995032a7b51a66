"""The dual-path engine (DESIGN.md §4).

Protocol:

1. The retrieval path (query + context) answers greedily with ``generate(output_logits=True)``; its
   next-token distributions are the generation's own raw logits, not a second pass.
2. The parametric path (query alone) is teacher-forced on the retrieval answer in **one** forward pass over
   parametric prompt + answer, so position t of both paths predicts the same token ``answer[t]``.
3. KL_t = KL(P_rag,t ‖ P_para,t) over the full vocabulary in float32 log-space; Z = Σ_{t<T} KL_t.

For the live view the parametric path's own free answer is generated in the same batched ``generate``
call as the retrieval answer (two left-padded rows), so both stream at once; scoring never needs it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from transformers import GenerationConfig
from transformers.generation.streamers import BaseStreamer

from core.maths.divergence import entropy, kl_divergence, kl_statistics, log_probs
from core.model.loading import ModelHandle
from core.model.prompts import TEMPLATE_CHOICES, build_prompt, clean_text, encode_prompt, resolve_template
from core.methods.repcs import Threshold, repcs_score, threshold_for, verdict
from core.engine.result import DualPathResult, PathOutput

logger = logging.getLogger(__name__)

RETRIEVAL = "retrieval"
PARAMETRIC = "parametric"
SCORING = "scoring"


@dataclass(frozen=True)
class DualPathSettings:
    """User-visible settings of a run.

    Attributes:
        max_new_tokens: most answer tokens generated per path.
        score_window: RePCS' T, the number of leading answer positions summed into Z.
        top_k: candidates kept per position for display.
        template: a key of :data:`core.prompts.TEMPLATES` or ``"auto"``.
        force_length: generate exactly ``max_new_tokens`` tokens (EOS suppressed; benchmarks).
        kl_split: early/late split point of the CRM level-2 statistics.
    """

    max_new_tokens: int = 64
    score_window: int = 64
    top_k: int = 10
    template: str = "auto"
    force_length: bool = False
    kl_split: int = 32

    def validate(self) -> None:
        if not 1 <= self.max_new_tokens <= 1024:
            raise ValueError(f"max_new_tokens must be between 1 and 1024, got {self.max_new_tokens}")
        if not 1 <= self.score_window <= 4096:
            raise ValueError(f"score_window T must be between 1 and 4096, got {self.score_window}")
        if not 1 <= self.top_k <= 100:
            raise ValueError(f"top_k must be between 1 and 100, got {self.top_k}")
        if self.template not in TEMPLATE_CHOICES:
            raise ValueError(f"Unknown template {self.template!r}; choose one of {', '.join(TEMPLATE_CHOICES)}")
        if self.kl_split < 1:
            raise ValueError(f"kl_split must be >= 1, got {self.kl_split}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class StreamEvent:
    """Progress of one path: the answer so far, how many tokens, and whether it is finished."""

    path: str
    text: str
    n_tokens: int
    max_tokens: int
    done: bool


EventCallback = Callable[[StreamEvent], None]


@dataclass(frozen=True)
class Prompt:
    """One path's prompt: its text and token ids."""

    prompt: str
    ids: list[int]


@dataclass(frozen=True)
class PreparedPrompts:
    """Validated inputs and both paths' prompts (``retrieval`` with the context, ``parametric`` without)."""

    query: str
    context: str
    template_key: str
    retrieval: Prompt
    parametric: Prompt
    warnings: tuple[str, ...]


def prepare_prompts(handle: ModelHandle, query: str, context: str, settings: DualPathSettings) -> PreparedPrompts:
    """Validate the inputs and build both prompts.

    Raises:
        ValueError: empty query or context, or a prompt that does not fit the model's token budget (the
            message gives the limit and the overshoot; nothing is ever silently truncated).
    """
    settings.validate()
    if not isinstance(query, str) or not isinstance(context, str):
        raise ValueError("query and context must be text")
    warnings: list[str] = []
    query, removed_q = clean_text(query)
    context, removed_c = clean_text(context)
    if removed_q or removed_c:
        warnings.append(
            f"Removed {removed_q + removed_c} control character(s) from the input (newlines and tabs are kept)."
        )
    query, context = query.strip(), context.strip()
    if not query:
        raise ValueError("The query is empty. Type a question (whitespace alone does not count).")
    if not context:
        raise ValueError(
            "The context is empty: with no context both paths are the same prompt and Z is 0 by construction. "
            "Paste the retrieved passage."
        )
    template = resolve_template(settings.template, handle.tokenizer)
    rag_prompt = build_prompt(template, handle.tokenizer, query, context)
    para_prompt = build_prompt(template, handle.tokenizer, query, None)
    rag_ids = encode_prompt(template, handle.tokenizer, rag_prompt)
    para_ids = encode_prompt(template, handle.tokenizer, para_prompt)
    budget = handle.info.max_tokens
    needed = len(rag_ids) + settings.max_new_tokens
    if needed > budget:
        raise ValueError(
            f"Too long for this model: the retrieval prompt is {len(rag_ids):,} tokens and the answer may take "
            f"{settings.max_new_tokens} more, {needed:,} in all, over the limit of {budget:,} tokens. Shorten the "
            f"context by at least {needed - budget:,} tokens (nothing is cut automatically)."
        )
    return PreparedPrompts(
        query, context, template.key, Prompt(rag_prompt, rag_ids), Prompt(para_prompt, para_ids), tuple(warnings)
    )


class _RowStreamer(BaseStreamer):
    """Receives each generation step's tokens for every batch row and reports them per path."""

    def __init__(self, handle: ModelHandle, paths: list[str], max_tokens: int, callback: EventCallback) -> None:
        self.handle = handle
        self.paths = paths
        self.max_tokens = max_tokens
        self.callback = callback
        self.ids: list[list[int]] = [[] for _ in paths]
        self.done = [False] * len(paths)
        self._prompt_seen = False
        self._eos = set(handle.eos_token_ids)

    def put(self, value: torch.Tensor) -> None:
        if not self._prompt_seen:  # generate() first hands over the prompt itself
            self._prompt_seen = True
            return
        step = value.reshape(len(self.paths), -1)[:, -1].tolist()
        for row, token in enumerate(step):
            if self.done[row]:
                continue
            self.ids[row].append(int(token))
            finished = int(token) in self._eos or len(self.ids[row]) >= self.max_tokens
            self.done[row] = finished
            self._emit(row, finished)

    def _emit(self, row: int, done: bool) -> None:
        text = self.handle.tokenizer.decode(self.ids[row], skip_special_tokens=True)
        self.callback(StreamEvent(self.paths[row], text, len(self.ids[row]), self.max_tokens, done))

    def end(self) -> None:
        for row in range(len(self.paths)):
            if not self.done[row]:
                self.done[row] = True
                self._emit(row, True)


def _generation_config(handle: ModelHandle, settings: DualPathSettings) -> GenerationConfig:
    return GenerationConfig(
        max_new_tokens=settings.max_new_tokens,
        min_new_tokens=settings.max_new_tokens if settings.force_length else None,
        do_sample=False,
        num_beams=1,
        temperature=None,
        top_p=None,
        top_k=None,
        eos_token_id=handle.eos_token_ids or None,
        pad_token_id=handle.pad_token_id,
        output_logits=True,
        return_dict_in_generate=True,
    )


def generate_greedy(
    handle: ModelHandle,
    prompts: list[list[int]],
    settings: DualPathSettings,
    *,
    paths: list[str] | None = None,
    on_event: EventCallback | None = None,
) -> list[tuple[list[int], torch.Tensor, str]]:
    """Greedy answers for a left-padded batch of prompts, with the raw logits of every step.

    Returns:
        One ``(token_ids, logits, finish)`` per prompt: the answer's ids up to and including the first EOS,
        its logits of shape ``(n, V)`` (model dtype, on the model's device) where row t is the distribution
        that produced ``token_ids[t]``, and ``"eos"`` or ``"length"``.
    """
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    width = max(len(p) for p in prompts)
    pad = handle.pad_token_id
    input_ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompts], dtype=torch.long)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], dtype=torch.long)
    streamer = None
    if on_event is not None:
        streamer = _RowStreamer(handle, paths or [f"row{i}" for i in range(len(prompts))], settings.max_new_tokens, on_event)
    eos = set(handle.eos_token_ids)
    with handle.lock, torch.inference_mode():
        out = handle.model.generate(
            input_ids=input_ids.to(handle.device),
            attention_mask=mask.to(handle.device),
            generation_config=_generation_config(handle, settings),
            streamer=streamer,
        )
    new = out.sequences[:, width:].tolist()
    logits = torch.stack(out.logits, dim=1)  # (batch, steps, V)
    results = []
    for row, ids in enumerate(new):
        n = len(ids)
        finish = "length"
        for i, tok in enumerate(ids):
            if tok in eos and not settings.force_length:
                n, finish = i + 1, "eos"
                break
        results.append((ids[:n], logits[row, :n], finish))
    return results


def teacher_forced_logits(handle: ModelHandle, prompt_ids: list[int], answer_ids: list[int]) -> torch.Tensor:
    """One forward pass over prompt + answer; returns the logits that predict each answer token.

    Row t of the result is the distribution over ``answer_ids[t]`` given ``prompt + answer[:t]``, shape
    ``(len(answer_ids), V)``. Only those rows are materialised (``logits_to_keep``).
    """
    n = len(answer_ids)
    if n == 0:
        raise ValueError("answer_ids is empty")
    ids = torch.tensor([list(prompt_ids) + list(answer_ids[:-1])], dtype=torch.long, device=handle.device)
    with handle.lock, torch.inference_mode():
        try:
            logits = handle.model(input_ids=ids, logits_to_keep=n, use_cache=False).logits
        except TypeError:  # a model class without logits_to_keep
            logits = handle.model(input_ids=ids, use_cache=False).logits
    return logits[0, -n:]


def _topk(logp: torch.Tensor, k: int) -> tuple[np.ndarray, np.ndarray]:
    k = min(k, logp.shape[-1])
    values, ids = torch.topk(logp, k, dim=-1)
    return ids.cpu().numpy().astype(np.int64), values.exp().cpu().numpy().astype(np.float32)


def score_paths(rag_logits: torch.Tensor, para_logits: torch.Tensor, answer_ids: list[int], top_k: int) -> dict[str, np.ndarray]:
    """Per-position KL, entropies, answer-token log-probs and top-k of both paths (float32, CPU numpy).

    Args:
        rag_logits, para_logits: ``(n, V)`` logits predicting ``answer_ids`` on each path.
    """
    if rag_logits.shape != para_logits.shape:
        raise ValueError(f"path logits differ in shape: {tuple(rag_logits.shape)} vs {tuple(para_logits.shape)}")
    if rag_logits.shape[0] != len(answer_ids):
        raise ValueError(f"{rag_logits.shape[0]} logit rows for {len(answer_ids)} answer tokens")
    lp_rag, lp_para = log_probs(rag_logits), log_probs(para_logits.to(rag_logits.device))
    index = torch.tensor(answer_ids, dtype=torch.long, device=lp_rag.device).unsqueeze(-1)
    ids_rag, probs_rag = _topk(lp_rag, top_k)
    ids_para, probs_para = _topk(lp_para, top_k)
    return {
        "token_kl": kl_divergence(lp_rag, lp_para).cpu().numpy(),
        "entropy_rag": entropy(lp_rag).cpu().numpy(),
        "entropy_para": entropy(lp_para).cpu().numpy(),
        "logprob_rag": lp_rag.gather(-1, index).squeeze(-1).cpu().numpy(),
        "logprob_para": lp_para.gather(-1, index).squeeze(-1).cpu().numpy(),
        "topk_ids_rag": ids_rag,
        "topk_probs_rag": probs_rag,
        "topk_ids_para": ids_para,
        "topk_probs_para": probs_para,
    }


def calibration_mismatch(threshold: Threshold, settings: DualPathSettings) -> list[str]:
    """Warnings when a run's settings differ from those τ was calibrated with (τ is then not comparable)."""
    out = []
    if threshold.T != settings.score_window:
        out.append(
            f"τ was calibrated with T = {threshold.T} answer tokens but this run sums T = {settings.score_window}; "
            "Z and τ are not on the same scale — recalibrate for this T or restore it."
        )
    calibrated_template = (threshold.extra or {}).get("template")
    if calibrated_template and calibrated_template != settings.template:
        out.append(
            f"τ was calibrated with template {calibrated_template!r}, this run uses {settings.template!r}; "
            "the verdict may not transfer."
        )
    return out


def build_result(
    handle: ModelHandle,
    prepared: PreparedPrompts,
    settings: DualPathSettings,
    rag_ids: list[int],
    rag_finish: str,
    para_ids: list[int],
    para_finish: str,
    scores: dict[str, np.ndarray],
    threshold: Threshold | None,
    threshold_source: str | None,
    timings: dict[str, float],
) -> DualPathResult:
    """The :class:`DualPathResult` of one row from its parts (shared by :func:`run_dual_path` and the batched
    :func:`core.batch.score_batch`, so both build results the same way).

    Args:
        rag_ids, rag_finish: the retrieval answer's token ids and why it stopped.
        para_ids, para_finish: the parametric path's free answer (``[]`` and ``"not generated"`` when skipped).
        scores: :func:`score_paths` of the row.
        threshold: τ to apply (already resolved; ``None`` = uncalibrated); ``threshold_source`` says where from.
    """
    window = min(settings.score_window, len(rag_ids))
    z = repcs_score(scores["token_kl"], settings.score_window)
    tau = None if threshold is None else float(threshold.tau)
    warnings = list(prepared.warnings)
    if threshold is not None:
        warnings += calibration_mismatch(threshold, settings)
    log_ratio = np.abs(scores["logprob_rag"][:window].astype(np.float64) - scores["logprob_para"][:window])
    tok = handle.tokenizer
    def path_output(prompt: Prompt, ids: list[int], finish: str, suffix: str) -> PathOutput:
        return PathOutput(
            prompt=prompt.prompt,
            prompt_len=len(prompt.ids),
            answer=tok.decode(ids, skip_special_tokens=True).strip() if ids else "",
            token_ids=[int(i) for i in ids],
            tokens=handle.decode_tokens(ids),
            finish=finish,
            entropy=scores[f"entropy_{suffix}"],
            logprob=scores[f"logprob_{suffix}"],
            topk_ids=scores[f"topk_ids_{suffix}"],
            topk_probs=scores[f"topk_probs_{suffix}"],
            topk_tokens=[handle.decode_tokens(row) for row in scores[f"topk_ids_{suffix}"].tolist()],
        )

    return DualPathResult(
        model=handle.info.name,
        model_info=handle.info.to_dict(),
        query=prepared.query,
        context=prepared.context,
        template=prepared.template_key,
        settings=settings.to_dict(),
        retrieval=path_output(prepared.retrieval, rag_ids, rag_finish, "rag"),
        parametric=path_output(prepared.parametric, para_ids, para_finish, "para"),
        token_kl=scores["token_kl"],
        score_window=settings.score_window,
        repcs_score=z,
        threshold=tau,
        threshold_source=threshold_source or ("given" if threshold is not None else "no threshold available"),
        verdict=verdict(z, tau) if tau is not None else "uncalibrated",
        kl_stats=kl_statistics(scores["token_kl"][:window], settings.kl_split),
        max_abs_log_ratio=float(log_ratio.max()) if log_ratio.size else 0.0,
        warnings=warnings,
        timings=timings,
    )


def run_dual_path(
    handle: ModelHandle,
    query: str,
    context: str,
    settings: DualPathSettings | None = None,
    *,
    threshold: Threshold | None = None,
    threshold_source: str | None = None,
    on_event: EventCallback | None = None,
    free_parametric: bool = True,
) -> DualPathResult:
    """Run both paths and score them (DESIGN.md §4).

    Args:
        handle: the shared model.
        query, context: user text (validated; see :func:`prepare_prompts`).
        settings: :class:`DualPathSettings` (defaults if ``None``).
        threshold: τ to apply; default: :func:`core.repcs.threshold_for` the model.
        on_event: called with a :class:`StreamEvent` after every generated token of either path, then twice
            for the scoring step (``path == "scoring"``: once when it starts, once with ``done=True``).
        free_parametric: also generate the parametric path's own answer (batched with the retrieval
            answer). ``False`` gives the cheapest exact score: one generate + one forward pass.

    Returns:
        A :class:`DualPathResult` (CPU numpy arrays and strings only).
    """
    settings = settings or DualPathSettings()
    prepared = prepare_prompts(handle, query, context, settings)
    t0 = time.perf_counter()
    with handle.lock:
        if free_parametric:
            (rag_ids, rag_logits, rag_finish), (para_ids, _, para_finish) = generate_greedy(
                handle, [prepared.retrieval.ids, prepared.parametric.ids], settings,
                paths=[RETRIEVAL, PARAMETRIC], on_event=on_event,
            )
        else:
            ((rag_ids, rag_logits, rag_finish),) = generate_greedy(
                handle, [prepared.retrieval.ids], settings, paths=[RETRIEVAL], on_event=on_event
            )
            para_ids, para_finish = [], "not generated"
        t1 = time.perf_counter()
        if on_event is not None:
            on_event(StreamEvent(SCORING, "", 0, 1, False))
        para_logits = teacher_forced_logits(handle, prepared.parametric.ids, rag_ids)
    scores = score_paths(rag_logits, para_logits, rag_ids, settings.top_k)
    t2 = time.perf_counter()
    del rag_logits, para_logits
    if threshold is None:
        threshold, default_source = threshold_for(handle.info.name)
        threshold_source = threshold_source or default_source
    result = build_result(
        handle, prepared, settings, rag_ids, rag_finish, list(para_ids), para_finish, scores, threshold,
        threshold_source, {"generate_s": t1 - t0, "score_s": t2 - t1, "total_s": t2 - t0},
    )
    if on_event is not None:
        on_event(StreamEvent(SCORING, "", 1, 1, True))
    return result
