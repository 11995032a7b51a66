"""ReDeEP's one traced forward: ECS per answer token and head, PKS per answer token and layer.

One :func:`core.model.trace.trace` over the retrieval path, teacher-forced (the retrieval prompt followed by the
retrieval answer ``answer[:-1]``). Answer token ``n`` is scored at the position that *predicts* it (the query row
``prompt_len − 1 + n``), the position axis of the dual path's ``token_kl`` — so each token's ECS, PKS and KL
line up. (The authors' code reads the row of token ``n`` itself, i.e. the step that predicts ``n + 1``.)

* **ECS** (eq. 3): ``ECS_n^{ℓ,h} = cos(x_n^L, ē)``, ``x_n^L`` the last layer's hidden state through the final
  norm (what the unembedding reads; transformers' ``hidden_states[-1]``, as the authors use it) and ``ē`` the
  mean of the same states over the top-k % context tokens that head (ℓ, h) attends to most from row n
  (``max(1, ⌈k/100 · n_ctx⌉)`` tokens, k = 10). Context tokens: the prompt tokens overlapping the context text
  (:func:`core.methods.internals.prompt_segments`).
* **PKS** (eq. 5): ``PKS_n^ℓ = JSD(q(x_n^{mid,ℓ}) ‖ q(x_n^ℓ))``, ``q`` the logit lens
  (:func:`core.model.lens.lens_logits`: final norm, unembedding, the family's logit scale and soft-cap),
  ``x^{mid,ℓ}`` the residual stream before layer ℓ's MLP (:func:`core.model.trace.residual_before_mlp`; for
  families with a norm after the MLP — Gemma 2/3, OLMo 2 — ``h_{ℓ+1} − post_norm(mlp_out)``) and ``x^ℓ``
  layer ℓ's output. Float32 log-space, nats, a sum over the whole vocabulary (the authors' code takes the mean
  over the vocabulary and multiplies it by 10⁶). Families with no state between attention and MLP (parallel
  residual) or no MLP module (OPT) get no PKS, with the reason (:func:`core.model.families.support`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from core.engine.result import RETRIEVAL, DualPathResult
from core.maths.divergence import log_probs, row_slices
from core.methods.internals.replay import path_sequence, prepared_for
from core.methods.internals.segments import CONTEXT, prompt_segments
from core.methods.redeep.maths import cosine, jsd, n_top
from core.model.families import support
from core.model.handle import ModelHandle
from core.model.lens import lens_logits
from core.model.parts import model_parts
from core.model.trace import ALL, AttentionReducer, Trace, residual_before_mlp, trace

DEFAULT_K_PERCENT = 10.0
POST_MLP_NORMS = ("post_feedforward_layernorm",)
"""A decoder layer's norm applied to the MLP's output before it joins the residual stream (sandwich norms)."""


@dataclass
class ReDeEPTrace:
    """ECS and PKS of one result's retrieval answer.

    Attributes:
        ecs: ``(N, n_layers, n_heads)`` float32, ECS of answer token n for head (ℓ, h) (cosine, −1 … 1).
        pks: ``(N, n_layers)`` float32 PKS of answer token n at layer ℓ (nats, 0 … ln 2), or ``None`` when the
            model has no MLP split (:attr:`pks_refusal` says why).
        n_context: context tokens in the prompt; ``n_top``: how many of them ē averages.
        k_percent: the k of the top-k %.
        tokens: the N scored answer tokens' texts; ``rows``: their query rows in the traced sequence.
    """

    ecs: np.ndarray
    pks: np.ndarray | None
    pks_refusal: str | None
    n_context: int
    n_top: int
    k_percent: float
    tokens: list[str]
    rows: list[int]

    @property
    def n_tokens(self) -> int:
        return int(self.ecs.shape[0])


def pks_refusal(handle: ModelHandle) -> str | None:
    """Why this model has no PKS (no state between attention and MLP), or ``None``."""
    return support(handle.model, handle.tokenizer).unavailable.get("mlp_split")


def top_context(k: int, rows: Sequence[int], context: Sequence[int]) -> AttentionReducer:
    """The ``k`` context positions each head attends to most from each query row → ``(H, R, k)`` int64 numpy
    (absolute positions; ties broken by :func:`torch.topk`)."""
    rows_cpu = torch.tensor(list(rows), dtype=torch.long)
    ctx_cpu = torch.tensor(list(context), dtype=torch.long)

    def reduce(layer: int, w: torch.Tensor) -> np.ndarray:
        r, c = rows_cpu.to(w.device), ctx_cpu.to(w.device)
        sub = w[:, r][:, :, c]  # (H, R, C)
        idx = torch.topk(sub, k, dim=-1).indices
        return c[idx].cpu().numpy().astype(np.int64)

    return reduce


def _post_mlp_norm(layer: torch.nn.Module) -> torch.nn.Module | None:
    for name in POST_MLP_NORMS:
        module = getattr(layer, name, None)
        if isinstance(module, torch.nn.Module):
            return module
    return None


def scored_tokens(result: DualPathResult) -> int:
    """The answer tokens ReDeEP scores: the run's window L = min(T, n) (``n_scored``), else every answer token."""
    n = len(result.answer_token_ids)
    return min(n, int(result.n_scored)) if result.n_scored else n


@dataclass(frozen=True)
class ReDeEPPlan:
    """What ReDeEP reads from a traced forward of the retrieval path, decided before the pass.

    Attributes:
        ids: the traced tokens (retrieval prompt + the first ``n_answer − 1`` answer tokens).
        rows: the query rows that predict answer tokens ``0 … n_answer − 1``; ``context``: the context positions.
        k: how many context tokens ē averages; ``k_percent``: the k of the top-k %.
        tokens: the scored answer tokens' texts; ``pks_refusal``: why there is no PKS (``"not asked"`` when
            PKS was not asked for), else ``None``.
    """

    ids: list[int]
    rows: list[int]
    context: list[int]
    k: int
    k_percent: float
    tokens: list[str]
    pks_refusal: str | None

    def reducer(self) -> AttentionReducer:
        """The attention reducer the pass needs (each head's top-k context positions from each scored row)."""
        return top_context(self.k, self.rows, self.context)


def plan_trace(
    handle: ModelHandle, result: DualPathResult, k_percent: float = DEFAULT_K_PERCENT, *, pks: bool = True
) -> ReDeEPPlan:
    """The tokens, rows and reducer of ReDeEP's traced forward of ``result`` (no model call).

    Raises:
        ValueError: an empty answer, no context token in the prompt, or another model's result.
    """
    n_answer = scored_tokens(result)
    if n_answer < 1:
        raise ValueError("the retrieval answer is empty: ReDeEP has no answer token to score")
    prepared = prepared_for(handle, result)
    segments = prompt_segments(handle, prepared, RETRIEVAL)
    context = [i for i, s in enumerate(segments) if s == CONTEXT]
    if not context:
        raise ValueError("the retrieval prompt has no context token: ReDeEP's ECS needs the context")
    ids, tokens, prompt_len = path_sequence(handle, result, RETRIEVAL)
    return ReDeEPPlan(
        ids=ids[: prompt_len + n_answer - 1],
        rows=[prompt_len - 1 + n for n in range(n_answer)],
        context=context,
        k=n_top(k_percent, len(context)),
        k_percent=float(k_percent),
        tokens=list(result.retrieval.tokens[:n_answer]) if result.retrieval.tokens else tokens[prompt_len:],
        pks_refusal=pks_refusal(handle) if pks else "not asked",
    )


def trace_options(plan: ReDeEPPlan) -> dict[str, Any]:
    """The :func:`core.model.trace.trace` options ReDeEP's pass needs (its reducer under ``"top"``)."""
    return {"positions": ALL, "mlp": plan.pks_refusal is None, "attention": {"top": plan.reducer()}}


def from_trace(
    handle: ModelHandle, plan: ReDeEPPlan, t: Trace, b: int = 0, *, layers: Sequence[int] | None = None
) -> ReDeEPTrace:
    """ECS and PKS from sequence ``b`` of a trace run with :func:`trace_options` (every position kept; the
    sequence may go on past ``plan.ids``: the scored rows and the context come first, and the pass is causal).

    Raises:
        ValueError: a trace without the reducer's values, or (PKS asked) without the MLP outputs.
    """
    if "top" not in t.attention or (plan.pks_refusal is None and not t.mlp_out):
        raise ValueError("this trace was not run with ReDeEP's options (trace_options)")
    parts = model_parts(handle)
    with handle.session():
        ecs = _ecs(handle, parts, t.residual[b], t.attention["top"][b], plan.rows)
        pks = _pks(handle, parts, t, b, plan.rows, layers) if plan.pks_refusal is None else None
    return ReDeEPTrace(
        ecs=ecs,
        pks=pks,
        pks_refusal=None if plan.pks_refusal == "not asked" else plan.pks_refusal,
        n_context=len(plan.context),
        n_top=plan.k,
        k_percent=plan.k_percent,
        tokens=list(plan.tokens),
        rows=list(plan.rows),
    )


def redeep_trace(
    handle: ModelHandle,
    result: DualPathResult,
    k_percent: float = DEFAULT_K_PERCENT,
    *,
    pks: bool = True,
    layers: Sequence[int] | None = None,
) -> ReDeEPTrace:
    """ECS (every head) and PKS (every layer, or only ``layers``) of the result's first :func:`scored_tokens`
    answer tokens: :func:`plan_trace`, one :func:`core.model.trace.trace`, :func:`from_trace`.

    Args:
        handle: the model that produced ``result`` (eager attention).
        result: a dual-path result with a non-empty retrieval answer.
        k_percent: the top-k % of context tokens per head (default 10).
        pks: compute PKS (where the model allows it).
        layers: the layers whose PKS to compute (the others are NaN); ``None``: every layer. Each layer costs two
            logit lenses over the whole vocabulary, so a detector asks only for its chosen layers.

    Raises:
        ValueError: an empty answer, no context token in the prompt, or another model's result.
    """
    plan = plan_trace(handle, result, k_percent, pks=pks)
    with handle.session():
        t = trace(handle, [plan.ids], **trace_options(plan))
        return from_trace(handle, plan, t, layers=layers)


def _param(handle: ModelHandle) -> torch.nn.Parameter:
    return next(handle.model.parameters())


def _ecs(handle: ModelHandle, parts, residual: torch.Tensor, tops: list, rows: list[int]) -> np.ndarray:
    param = _param(handle)
    last = residual[-1].to(device=param.device, dtype=param.dtype)  # (T, d) raw last-layer output
    normed = parts.final_norm(last).float()  # what the unembedding reads
    answer = normed[torch.tensor(rows, device=normed.device)]  # (R, d)
    per_layer = []
    for top in tops:  # per layer: (H, R, k) positions
        idx = torch.as_tensor(top, device=normed.device)
        mean = normed[idx].mean(dim=-2)  # (H, R, d)
        per_layer.append(cosine(answer[None], mean))  # (H, R)
    return torch.stack(per_layer).permute(2, 0, 1).cpu().numpy().astype(np.float32)  # (R, L, H)


PKS_LENS_BYTES = 64 * 2**20
"""The float32 logits one stacked logit lens of PKS may hold: the layers' rows before and after each MLP go through
the unembedding together (its weights read once, not twice per layer), in chunks of at most this many bytes; a
layer whose rows alone exceed it (more than 32 answer tokens of a 262,144-token vocabulary) is read in slices of
rows."""


def _pks(handle: ModelHandle, parts, t: Trace, b: int, rows: list[int], layers: Sequence[int] | None) -> np.ndarray:
    param = _param(handle)
    wanted = set(range(parts.n_layers) if layers is None else layers)
    r = torch.tensor(rows, dtype=torch.long)
    after = t.residual[b][1:, r]  # (L, R, d): x^ℓ
    mlp_out = t.mlp_out[b][:, r]
    before = residual_before_mlp(t, b)[:, r]  # (L, R, d): h_{ℓ+1} − mlp_out_ℓ
    chosen = [layer for layer in range(parts.n_layers) if layer in wanted]
    out = torch.full((parts.n_layers, len(rows)), float("nan"), device=param.device)
    vocab = max(1, int(parts.unembed.weight.shape[0]))
    # one layer's rows in slices when a layer alone is over the budget (a long answer of a large vocabulary);
    # otherwise all rows at once, several layers per unembedding product
    for cols in row_slices(len(rows), vocab, budget=PKS_LENS_BYTES // 2):
        n = cols.stop - cols.start
        per_chunk = max(1, PKS_LENS_BYTES // (2 * n * 4 * vocab))
        for start in range(0, len(chosen), per_chunk):  # the lens of several layers in one unembedding product
            layers_now = chosen[start : start + per_chunk]
            mids, posts = [], []
            for layer in layers_now:
                post = after[layer][cols].to(device=param.device, dtype=param.dtype)
                delta = mlp_out[layer][cols].to(device=param.device, dtype=param.dtype)
                norm = _post_mlp_norm(parts.layers[layer])
                mid = post - norm(delta) if norm is not None else before[layer][cols].to(param.device, param.dtype)
                mids.append(mid)
                posts.append(post)
            logp = log_probs(lens_logits(parts, torch.cat(mids + posts))).view(2, len(layers_now), n, -1)
            out[torch.tensor(layers_now, device=param.device), cols] = jsd(logp[0], logp[1])
    return out.T.cpu().numpy().astype(np.float32)  # (R, L)
