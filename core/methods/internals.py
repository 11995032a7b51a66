"""Inside the model: per-layer hidden states, attention reduced on the fly, and the logit lens.

One *instrumented forward* per path runs the model once over ``prompt + answer[:-1]`` with forward hooks
that keep only what the views need:

* **hidden states** at a few positions: ``states[0]`` is the input of decoder layer 0 (the embedding output,
  what ``hidden_states[0]`` holds in transformers) and ``states[ℓ + 1]`` is the output of decoder layer ℓ
  (before the final norm, for every layer including the last);
* **attention**, reduced inside the hook of each attention module, one layer at a time: the entropy of every
  query row, ``H_{ℓ,h}(i) = −Σ_j A_{ℓ,h}(i, j) log A_{ℓ,h}(i, j)`` (nats; RADAR appendix D.2.1), and the
  attention mass that chosen query rows put on each token segment (template, context, query, answer). The
  full ``(heads, T, T)`` weights of a layer live only while its hook runs; only the single head a user opens
  is ever kept whole (:func:`attention_pattern`). A full layers × heads × T × T stack is never built.

Positions follow the engine's convention: answer position ``t`` is the step that predicts answer token
``t``, i.e. the query row ``prompt_len − 1 + t``. Position 0 is therefore the last prompt token — where CRM
measures its displacement d_ℓ = h_ℓ(context) − h_ℓ(no context) (CRM §2, eq. 1).

The **logit lens** reads each layer's state through the model's final norm and unembedding,
``P_ℓ = softmax(W_U · norm(h_ℓ))``, and compares the two paths per layer with KL(P_rag,ℓ ‖ P_para,ℓ)
(the logit-lens baseline of CRM appendix F). At the last layer this is exactly the model's own output.

Every forward holds ``handle.lock`` under ``torch.inference_mode()``; hooks are removed in ``finally``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from core.maths.divergence import entropy, kl_divergence, log_probs
from core.engine.dual_path import PARAMETRIC, RETRIEVAL, DualPathSettings, PreparedPrompts, prepare_prompts
from core.model.loading import ModelHandle
from core.model.prompts import TEMPLATES
from core.engine.result import DualPathResult

logger = logging.getLogger(__name__)

SEGMENTS: tuple[str, ...] = ("template", "context", "query", "answer")
"""Token segments of a forward sequence: the template's own text and special tokens, the context, the
query, and the answer tokens fed back in (teacher forcing)."""
TEMPLATE, CONTEXT, QUERY, ANSWER = range(len(SEGMENTS))
PATHS: tuple[str, str] = (RETRIEVAL, PARAMETRIC)
RADAR_TAU = 1.5
"""RADAR's specialisation threshold τ (nats): a head is *specialised* when its attention entropy is below τ."""

Progress = Callable[[int, int, str], None]
"""``progress(done, total, label)``."""


# ----------------------------------------------------------------------------------------------------------
# Finding the parts of a causal LM


@dataclass(frozen=True)
class ModelParts:
    """The modules the instrumented forward hooks into.

    Attributes:
        layers: the decoder layers, in order (``len(layers) == n_layers``).
        attentions: each decoder layer's self-attention module (its forward returns ``(output, weights)``).
        final_norm: the norm applied after the last decoder layer.
        unembed: the output projection (``lm_head``), ``W_U`` of shape ``(V, d)``.
    """

    layers: tuple[torch.nn.Module, ...]
    attentions: tuple[torch.nn.Module, ...]
    final_norm: torch.nn.Module
    unembed: torch.nn.Module


_LAYER_LISTS = ("layers", "h", "blocks", "layer")
_NORMS = ("norm", "ln_f", "final_layer_norm", "norm_f", "final_norm")
_ATTENTIONS = ("self_attn", "attn", "attention", "self_attention")


def model_parts(handle: ModelHandle) -> ModelParts:
    """Locate decoder layers, attention modules, final norm and unembedding of ``handle.model``.

    Works for the Llama family (Llama, Mistral, Qwen, SmolLM, Gemma …) and GPT-2-style models.

    Raises:
        ValueError: when the model does not have that layout.
    """
    model = handle.model
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    candidates = [
        c for c in (decoder, getattr(model, "model", None), getattr(model, "transformer", None)) if c is not None
    ]
    layers = norm = None
    for base in candidates:
        for name in _LAYER_LISTS:
            value = getattr(base, name, None)
            if isinstance(value, torch.nn.ModuleList) and len(value) > 0:
                layers = value
                break
        for name in _NORMS:
            value = getattr(base, name, None)
            if isinstance(value, torch.nn.Module):
                norm = value
                break
        if layers is not None and norm is not None:
            break
    unembed = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if layers is None or norm is None or unembed is None:
        raise ValueError(
            f"Cannot find decoder layers, final norm and unembedding in {type(model).__name__}; the internals "
            "views support Llama-style and GPT-2-style causal LMs."
        )
    attentions = []
    for i, layer in enumerate(layers):
        attn = next(
            (getattr(layer, n) for n in _ATTENTIONS if isinstance(getattr(layer, n, None), torch.nn.Module)), None
        )
        if attn is None:
            raise ValueError(
                f"Decoder layer {i} of {type(model).__name__} has no self-attention module the views know."
            )
        attentions.append(attn)
    return ModelParts(tuple(layers), tuple(attentions), norm, unembed)


@contextmanager
def _hooked(registrations: list[Callable[[], torch.utils.hooks.RemovableHandle]]) -> Iterator[None]:
    """Register hooks on entry and remove every one of them on exit, whatever happens."""
    handles: list[torch.utils.hooks.RemovableHandle] = []
    try:
        for register in registrations:
            handles.append(register())
        yield
    finally:
        for h in handles:
            h.remove()


def _first(output: Any) -> torch.Tensor:
    return output[0] if isinstance(output, (tuple, list)) else output


def _forward(handle: ModelHandle, ids: torch.Tensor) -> None:
    """One forward pass whose logits are not needed (only the last row is materialised)."""
    try:
        handle.model(input_ids=ids, use_cache=False, logits_to_keep=1)
    except TypeError:  # a model class without logits_to_keep
        handle.model(input_ids=ids, use_cache=False)


# ----------------------------------------------------------------------------------------------------------
# The instrumented forward


@dataclass
class ForwardCapture:
    """What one instrumented forward kept (CPU numpy, float32).

    Attributes:
        states: ``(n_layers + 1, P, d)`` hidden states at the requested positions.
        entropy: ``(n_layers, n_heads, T)`` attention entropy of every query row (nats), or ``None``.
        mass: ``(n_layers, n_heads, R, S)`` attention mass of the requested rows on each of ``S`` segments,
            or ``None``.
        pattern: ``(T, T)`` attention weights of the one requested head, or ``None``.
    """

    states: np.ndarray
    entropy: np.ndarray | None = None
    mass: np.ndarray | None = None
    pattern: np.ndarray | None = None


def _check_ids(handle: ModelHandle, ids: Sequence[int]) -> list[int]:
    ids = [int(i) for i in ids]
    if not ids:
        raise ValueError("ids is empty: the forward pass needs at least one token")
    vocab = int(handle.model.get_input_embeddings().weight.shape[0])
    bad = [i for i in ids if not 0 <= i < vocab]
    if bad:
        raise ValueError(f"token ids out of the vocabulary range [0, {vocab}): {bad[:5]}")
    return ids


def _check_positions(positions: Sequence[int], length: int, name: str) -> list[int]:
    out = []
    for p in positions:
        p = int(p)
        if not -length <= p < length:
            raise ValueError(f"{name} {p} is outside a sequence of {length} tokens")
        out.append(p % length)
    if not out:
        raise ValueError(f"{name} is empty")
    return out


def instrumented_forward(
    handle: ModelHandle,
    ids: Sequence[int],
    *,
    positions: Sequence[int] | None = None,
    attention: bool = False,
    rows: Sequence[int] | None = None,
    segment_ids: Sequence[int] | None = None,
    n_segments: int = len(SEGMENTS),
    head: tuple[int, int] | None = None,
) -> ForwardCapture:
    """One forward pass over ``ids`` with hooks that reduce as they go.

    Args:
        handle: the shared model (must use eager attention for the attention reductions).
        ids: the token ids of one sequence, length T.
        positions: where to keep hidden states (default: the last token); negative indices count from the end.
        attention: reduce attention: entropy of every query row, and mass per segment for ``rows``.
        rows: the query rows whose attention mass per segment is kept (requires ``segment_ids``).
        segment_ids: the segment (``0 … n_segments−1``) of each of the T tokens.
        n_segments: the number of segments.
        head: ``(layer, head)`` whose full ``(T, T)`` attention pattern is kept.

    Returns:
        A :class:`ForwardCapture`.

    Raises:
        ValueError: bad ids, positions, rows, segments or head; or a model that returns no attention weights
            (load it with ``attn_implementation="eager"``).
    """
    ids = _check_ids(handle, ids)
    T = len(ids)
    positions = _check_positions(positions if positions is not None else [-1], T, "position")
    parts = model_parts(handle)
    n_layers = len(parts.layers)
    if rows is not None:
        rows = _check_positions(rows, T, "row")
        if segment_ids is None:
            raise ValueError("rows need segment_ids (the segment of every token)")
    if segment_ids is not None:
        seg = np.asarray(segment_ids, dtype=np.int64)
        if seg.shape != (T,):
            raise ValueError(f"segment_ids must have one entry per token ({T}), got shape {seg.shape}")
        if seg.size and (seg.min() < 0 or seg.max() >= n_segments):
            raise ValueError(f"segment ids must be in [0, {n_segments})")
    if head is not None:
        layer_i, head_i = int(head[0]), int(head[1])
        if not 0 <= layer_i < n_layers or not 0 <= head_i < handle.info.n_heads:
            raise ValueError(f"head {head} is outside {n_layers} layers × {handle.info.n_heads} heads")
        head = (layer_i, head_i)

    device = handle.device
    pos_t = torch.tensor(positions, dtype=torch.long, device=device)
    states: list[torch.Tensor | None] = [None] * (n_layers + 1)
    entropies: list[np.ndarray | None] = [None] * n_layers
    masses: list[np.ndarray | None] = [None] * n_layers
    pattern: list[np.ndarray] = []
    rows_t = torch.tensor(rows, dtype=torch.long, device=device) if rows is not None else None
    onehot = None
    if rows is not None and segment_ids is not None:
        onehot = torch.nn.functional.one_hot(
            torch.as_tensor(np.asarray(segment_ids), device=device), n_segments
        ).float()

    def input_hook(module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        hidden = args[0] if args else kwargs["hidden_states"]
        states[0] = hidden[0, pos_t].float().cpu()

    def layer_hook(index: int) -> Callable[..., None]:
        def hook(module: torch.nn.Module, args: tuple, output: Any) -> None:
            states[index + 1] = _first(output)[0, pos_t].float().cpu()

        return hook

    def attention_hook(index: int) -> Callable[..., None]:
        def hook(module: torch.nn.Module, args: tuple, output: Any) -> None:
            weights = output[1] if isinstance(output, (tuple, list)) and len(output) > 1 else None
            if weights is None:
                raise ValueError(
                    "The model returned no attention weights: load it with attn_implementation='eager' "
                    "(SDPA and flash attention do not expose them)."
                )
            w = weights[0].float()  # (H, T, T): this layer only, freed when the hook returns
            if attention:
                entropies[index] = torch.special.entr(w).sum(dim=-1).cpu().numpy()
                if rows_t is not None and onehot is not None:
                    masses[index] = torch.einsum("hrt,ts->hrs", w[:, rows_t, :], onehot).cpu().numpy()
            if head is not None and head[0] == index:
                pattern.append(w[head[1]].cpu().numpy().astype(np.float32, copy=True))

        return hook

    registrations: list[Callable[[], torch.utils.hooks.RemovableHandle]] = [
        lambda: parts.layers[0].register_forward_pre_hook(input_hook, with_kwargs=True)
    ]
    for i, layer in enumerate(parts.layers):
        registrations.append(lambda i=i, layer=layer: layer.register_forward_hook(layer_hook(i)))
    for i, attn in enumerate(parts.attentions):
        if attention or (head is not None and head[0] == i):
            registrations.append(lambda i=i, attn=attn: attn.register_forward_hook(attention_hook(i)))

    input_ids = torch.tensor([ids], dtype=torch.long, device=device)
    with handle.lock, torch.inference_mode(), _hooked(registrations):
        _forward(handle, input_ids)
    if any(s is None for s in states):
        raise ValueError("The forward pass did not reach every decoder layer (unsupported model layout).")
    out = ForwardCapture(states=torch.stack(states).numpy().astype(np.float32, copy=False))  # type: ignore[arg-type]
    if attention:
        out.entropy = np.stack(entropies).astype(np.float32, copy=False)  # type: ignore[arg-type]
        if rows is not None:
            out.mass = np.stack(masses).astype(np.float32, copy=False)  # type: ignore[arg-type]
    if pattern:
        out.pattern = pattern[0]
    return out


def layer_states(handle: ModelHandle, ids: list[int], positions: Sequence[int] | None = None) -> np.ndarray:
    """Hidden states of every layer at ``positions`` (default: the last token), from one forward pass.

    Args:
        handle: the shared model.
        ids: token ids of one sequence.
        positions: token positions (negative counts from the end); default ``[len(ids) − 1]``.

    Returns:
        float32 array of shape ``(n_layers + 1, len(positions), hidden)``: index 0 is the embedding output
        (the input of decoder layer 0), index ℓ + 1 the output of decoder layer ℓ (before the final norm).
    """
    return instrumented_forward(handle, ids, positions=positions).states


def result_settings(result: DualPathResult) -> DualPathSettings:
    """The :class:`DualPathSettings` a result was produced with (keys this version does not know are ignored)."""
    known = DualPathSettings.__dataclass_fields__
    return DualPathSettings(**{k: v for k, v in result.settings.items() if k in known})


def _prepared_for(handle: ModelHandle, result: DualPathResult) -> PreparedPrompts:
    """Rebuild both prompts of a result with the engine (same template and settings) and check them."""
    settings = result_settings(result)
    prepared = prepare_prompts(handle, result.query, result.context, settings)
    if len(prepared.retrieval.ids) != result.retrieval.prompt_len or len(prepared.parametric.ids) != result.parametric.prompt_len:
        raise ValueError(
            "This result's prompts do not tokenise to the same lengths with the loaded model "
            f"({len(prepared.retrieval.ids)}/{len(prepared.parametric.ids)} vs {result.retrieval.prompt_len}/"
            f"{result.parametric.prompt_len} tokens): it was produced by another model or tokenizer."
        )
    return prepared


def displacement(handle: ModelHandle, result: DualPathResult) -> np.ndarray:
    """CRM's displacement at the last prompt token, every layer (CRM §2, eq. 1's ``h_ℓ^c − h_ℓ^0``).

    ``d_ℓ = h_ℓ(retrieval prompt)[last] − h_ℓ(parametric prompt)[last]``, the prompts rebuilt with
    :func:`core.engine.prepare_prompts` from the result's query, context and settings.

    Returns:
        float32 array ``(n_layers + 1, hidden)``; row 0 is the embedding layer (zero whenever both prompts end
        in the same token, as the templates do).
    """
    prepared = _prepared_for(handle, result)
    with handle.lock:
        rag = layer_states(handle, prepared.retrieval.ids)[:, 0]
        para = layer_states(handle, prepared.parametric.ids)[:, 0]
    return (rag.astype(np.float64) - para.astype(np.float64)).astype(np.float32)


# ----------------------------------------------------------------------------------------------------------
# Token segments


def prompt_segments(handle: ModelHandle, prepared: PreparedPrompts, path: str) -> list[int]:
    """The segment (index into :data:`SEGMENTS`) of every token of one path's prompt.

    Tokens whose characters overlap the context (retrieval prompt only) are ``context``, those overlapping
    the query are ``query``, everything else (template words, role markers, special tokens) ``template``.
    Uses the tokenizer's offset mapping; without one, every token is ``template`` (and a warning is logged).
    """
    if path not in PATHS:
        raise ValueError(f"path must be {RETRIEVAL!r} or {PARAMETRIC!r}, got {path!r}")
    text = prepared.retrieval.prompt if path == RETRIEVAL else prepared.parametric.prompt
    ids = prepared.retrieval.ids if path == RETRIEVAL else prepared.parametric.ids
    chat = TEMPLATES[prepared.template_key].chat
    spans: list[tuple[int, int, int]] = []
    start = 0
    if path == RETRIEVAL:
        c0 = text.find(prepared.context)
        if c0 >= 0:
            spans.append((c0, c0 + len(prepared.context), CONTEXT))
            start = c0 + len(prepared.context)
    q0 = text.find(prepared.query, start)
    if q0 < 0:
        q0 = text.find(prepared.query)
    if q0 >= 0:
        spans.append((q0, q0 + len(prepared.query), QUERY))
    try:
        enc = handle.tokenizer(text, add_special_tokens=not chat, return_offsets_mapping=True)
        offsets = enc["offset_mapping"]
        if list(enc["input_ids"]) != list(ids):
            raise ValueError("offsets tokenisation differs")
    except (NotImplementedError, ValueError, KeyError, TypeError):
        logger.warning("No usable offset mapping for this tokenizer: attention mass per segment is unavailable")
        return [TEMPLATE] * len(ids)
    out = []
    for s, e in offsets:
        label = TEMPLATE
        if e > s:
            for a, b, seg in spans:
                if s < b and e > a:
                    label = seg
                    break
        out.append(label)
    return out


# ----------------------------------------------------------------------------------------------------------
# Logit lens


@dataclass
class LensComparison:
    """The logit lens of two paths at the same positions (float32 numpy; ``L1 = n_layers + 1`` rows).

    Attributes:
        kl: ``(L1, P)`` KL(P_a,ℓ ‖ P_b,ℓ) in nats.
        entropy_a, entropy_b: ``(L1, P)`` entropies in nats.
        topk_ids_a, topk_ids_b: ``(L1, P, k)`` top-k token ids; ``topk_probs_*`` their probabilities.
        target_logprob_a, target_logprob_b: ``(L1, P)`` log-probability of the target token at each position
            (NaN where no target is given).
    """

    kl: np.ndarray
    entropy_a: np.ndarray
    entropy_b: np.ndarray
    topk_ids_a: np.ndarray
    topk_ids_b: np.ndarray
    topk_probs_a: np.ndarray
    topk_probs_b: np.ndarray
    target_logprob_a: np.ndarray
    target_logprob_b: np.ndarray


def lens_log_probs(handle: ModelHandle, states: np.ndarray) -> torch.Tensor:
    """Logit-lens log-probabilities ``log softmax(W_U · norm(h))`` for states of shape ``(..., d)``.

    Returns:
        float32 tensor ``(..., V)`` on the model's device.
    """
    parts = model_parts(handle)
    param = next(handle.model.parameters())
    h = torch.as_tensor(np.asarray(states), device=param.device).to(param.dtype)
    if h.shape[-1] != handle.info.hidden_size:
        raise ValueError(f"states must end in the hidden size {handle.info.hidden_size}, got shape {tuple(h.shape)}")
    with handle.lock, torch.inference_mode():
        return log_probs(parts.unembed(parts.final_norm(h)))


def logit_lens_compare(
    handle: ModelHandle,
    states_a: np.ndarray,
    states_b: np.ndarray,
    *,
    targets: Sequence[int] | None = None,
    top_k: int = 10,
    chunk: int = 64,
) -> LensComparison:
    """Compare two paths layer by layer through the logit lens (CRM appendix F's logit-lens baseline).

    Args:
        states_a, states_b: ``(n_layers + 1, P, d)`` hidden states of the two paths at aligned positions.
        targets: ``P`` token ids (or fewer: the rest get NaN) whose log-probability is reported per layer.
        top_k: candidates kept per layer and position.
        chunk: (layer, position) rows projected at once; bounds memory to ``chunk × V`` floats per path
            while reading the unembedding matrix only ``⌈L1·P / chunk⌉`` times.

    Returns:
        A :class:`LensComparison`; KL is KL(P_a ‖ P_b) over the full vocabulary, float32 log-space.
    """
    a, b = np.asarray(states_a), np.asarray(states_b)
    if a.ndim != 3 or a.shape != b.shape:
        raise ValueError(f"states must both be (layers + 1, P, d) of one shape, got {a.shape} and {b.shape}")
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    n_l, n_p, dim = a.shape
    n_rows = n_l * n_p
    k = min(top_k, handle.info.vocab_size)
    flat_a, flat_b = a.reshape(n_rows, dim), b.reshape(n_rows, dim)
    tgt = np.full(n_p, -1, np.int64)
    if targets is not None:
        t = [int(x) for x in targets][:n_p]
        tgt[: len(t)] = t
    tgt_rows = np.tile(tgt, n_l)  # row r = layer * P + position
    kl = np.zeros(n_rows, np.float32)
    ent_a, ent_b = np.zeros_like(kl), np.zeros_like(kl)
    ids_a, ids_b = np.zeros((n_rows, k), np.int64), np.zeros((n_rows, k), np.int64)
    pr_a, pr_b = np.zeros((n_rows, k), np.float32), np.zeros((n_rows, k), np.float32)
    tg_a, tg_b = np.full(n_rows, np.nan, np.float32), np.full(n_rows, np.nan, np.float32)
    with handle.lock:
        for s in range(0, n_rows, chunk):
            e = min(n_rows, s + chunk)
            lp_a = lens_log_probs(handle, flat_a[s:e])
            lp_b = lens_log_probs(handle, flat_b[s:e])
            kl[s:e] = kl_divergence(lp_a, lp_b).cpu().numpy()
            ent_a[s:e] = entropy(lp_a).cpu().numpy()
            ent_b[s:e] = entropy(lp_b).cpu().numpy()
            has = tgt_rows[s:e] >= 0
            sel = torch.as_tensor(np.where(has, tgt_rows[s:e], 0), device=lp_a.device).unsqueeze(-1)
            for lp, ids_out, pr_out, tg_out in ((lp_a, ids_a, pr_a, tg_a), (lp_b, ids_b, pr_b, tg_b)):
                values, idx = torch.topk(lp, k, dim=-1)
                ids_out[s:e] = idx.cpu().numpy()
                pr_out[s:e] = values.exp().cpu().numpy()
                picked = lp.gather(-1, sel).squeeze(-1).cpu().numpy()
                tg_out[s:e] = np.where(has, picked, np.nan)
            del lp_a, lp_b

    def grid(x: np.ndarray) -> np.ndarray:
        return x.reshape(n_l, n_p, *x.shape[1:])

    return LensComparison(
        grid(kl), grid(ent_a), grid(ent_b), grid(ids_a), grid(ids_b), grid(pr_a), grid(pr_b), grid(tg_a), grid(tg_b)
    )


# ----------------------------------------------------------------------------------------------------------
# Attention summaries (RADAR appendix D.2.1)


def specialised_heads(entropy_lh: np.ndarray, tau: float = RADAR_TAU) -> int:
    """RADAR's ``N_spec = Σ_ℓ Σ_h 1[H_{ℓ,h} < τ]`` over a ``(layers, heads)`` entropy map (nats)."""
    h = np.asarray(entropy_lh, dtype=np.float64)
    if h.ndim != 2:
        raise ValueError(f"entropy map must be (layers, heads), got shape {h.shape}")
    return int((h < float(tau)).sum())


def attention_specialisation(entropy_lh: np.ndarray, tau: float = RADAR_TAU) -> dict[str, float]:
    """RADAR's five attention-specialisation features (appendix D.2.1) from a ``(layers, heads)`` map.

    With ``H̄ = mean_{ℓ,h} H_{ℓ,h}`` (nats):
    ``num_specialized_heads = Σ 1[H_{ℓ,h} < τ]``, ``head_specialization_score = 1 − H̄/3``,
    ``factual_head_activation = 1/(H̄ + 1e−8)``, ``reasoning_head_activation = H̄/3``,
    ``attention_entropy = H̄``. The constants 3.0 and 1e−8 are the paper's.
    """
    h = np.asarray(entropy_lh, dtype=np.float64)
    mean = float(h.mean()) if h.size else 0.0
    return {
        "num_specialized_heads": float(specialised_heads(h, tau)),
        "head_specialization_score": 1.0 - mean / 3.0,
        "factual_head_activation": 1.0 / (mean + 1e-8),
        "reasoning_head_activation": mean / 3.0,
        "attention_entropy": mean,
    }


# ----------------------------------------------------------------------------------------------------------
# The analysis of one result


@dataclass
class Internals:
    """Internals of both paths of one :class:`DualPathResult` (CPU numpy arrays and strings).

    ``L`` decoder layers, ``H`` heads, ``P = max(1, n)`` answer positions (position t predicts answer token
    t; t = 0 is the last prompt token), ``T_rag``/``T_para`` tokens per forward sequence (prompt + answer[:-1]).

    Attributes:
        rag_tokens, para_tokens: the tokens of each forward sequence (for pattern axes).
        rag_segments, para_segments: ``(T,)`` int8 segment of each token (index into :data:`SEGMENTS`).
        entropy_rag, entropy_para: ``(L, H, T)`` attention entropy of every query row (nats).
        mass_rag, mass_para: ``(L, H, P, S)`` attention mass of the answer positions' rows on each segment.
        displacement: ``(L + 1, P, d)`` d_ℓ(t) = h_ℓ(retrieval)[t] − h_ℓ(parametric)[t].
        hidden_norm_rag, hidden_norm_para: ``(L + 1, P)`` ‖h_ℓ‖ of each path.
        lens: the logit lens of both paths (a = retrieval, b = parametric) with the answer tokens as targets.
    """

    model: str
    n_layers: int
    n_heads: int
    hidden_size: int
    answer_tokens: list[str]
    answer_token_ids: list[int]
    rag_prompt_len: int
    para_prompt_len: int
    rag_tokens: list[str]
    para_tokens: list[str]
    rag_segments: np.ndarray
    para_segments: np.ndarray
    entropy_rag: np.ndarray
    entropy_para: np.ndarray
    mass_rag: np.ndarray
    mass_para: np.ndarray
    displacement: np.ndarray
    hidden_norm_rag: np.ndarray
    hidden_norm_para: np.ndarray
    lens: LensComparison
    lens_tokens: dict[int, str] = field(default_factory=dict)

    @property
    def n_positions(self) -> int:
        return int(self.displacement.shape[1])

    @property
    def disp_norm(self) -> np.ndarray:
        """``(L + 1, P)`` the paper's magnitude baseline ‖d_ℓ(t)‖₂ (CRM appendix E), float64."""
        return np.linalg.norm(self.displacement.astype(np.float64), axis=-1)

    def prompt_len(self, path: str) -> int:
        """The prompt length of one path (its sequence continues with answer[:-1])."""
        if path == RETRIEVAL:
            return self.rag_prompt_len
        if path == PARAMETRIC:
            return self.para_prompt_len
        raise ValueError(f"path must be {RETRIEVAL!r} or {PARAMETRIC!r}, got {path!r}")

    def rows(self, path: str) -> np.ndarray:
        """Query rows of the answer positions in one path's sequence (row of t = prompt_len − 1 + t)."""
        return self.prompt_len(path) - 1 + np.arange(self.n_positions)

    def tokens(self, path: str) -> list[str]:
        """The tokens of one path's forward sequence."""
        self.prompt_len(path)
        return self.rag_tokens if path == RETRIEVAL else self.para_tokens

    def segments(self, path: str) -> np.ndarray:
        """``(T,)`` segment index of each token of one path's forward sequence."""
        self.prompt_len(path)
        return self.rag_segments if path == RETRIEVAL else self.para_segments

    def entropy_at(self, path: str, where: int | str = 0) -> np.ndarray:
        """``(L, H)`` attention entropy at answer position ``where`` (an int) or ``"mean"`` over the answer."""
        ent = self.entropy_rag if path == RETRIEVAL else self.entropy_para if path == PARAMETRIC else None
        if ent is None:
            raise ValueError(f"path must be {RETRIEVAL!r} or {PARAMETRIC!r}, got {path!r}")
        rows = self.rows(path)
        if where == "mean":
            return ent[:, :, rows].astype(np.float64).mean(axis=-1)
        t = self._position(where)
        return ent[:, :, rows[t]].astype(np.float64)

    def mass_at(self, path: str, segment: str, where: int | str = 0) -> np.ndarray:
        """``(L, H)`` attention mass on ``segment`` at answer position ``where`` or ``"mean"`` over the answer."""
        if segment not in SEGMENTS:
            raise ValueError(f"segment must be one of {SEGMENTS}, got {segment!r}")
        mass = self.mass_rag if path == RETRIEVAL else self.mass_para if path == PARAMETRIC else None
        if mass is None:
            raise ValueError(f"path must be {RETRIEVAL!r} or {PARAMETRIC!r}, got {path!r}")
        s = SEGMENTS.index(segment)
        if where == "mean":
            return mass[:, :, :, s].astype(np.float64).mean(axis=-1)
        return mass[:, :, self._position(where), s].astype(np.float64)

    def _position(self, where: int | str) -> int:
        if isinstance(where, str):
            raise ValueError(f"position must be an int or 'mean', got {where!r}")
        t = int(where)
        if not 0 <= t < self.n_positions:
            raise ValueError(f"answer position must be in [0, {self.n_positions}), got {t}")
        return t

    def lens_token(self, token_id: int) -> str:
        """The decoded text of a token id that appears in the logit-lens top-k."""
        return self.lens_tokens.get(int(token_id), "")

    def lens_topk(self, path: str, t: int = 0, k: int = 5) -> list[list[tuple[str, float]]]:
        """Per hidden-state row, the logit-lens top-``k`` ``(token, probability)`` of one path at position t."""
        self.prompt_len(path)
        t = self._position(t)
        ids = self.lens.topk_ids_a if path == RETRIEVAL else self.lens.topk_ids_b
        probs = self.lens.topk_probs_a if path == RETRIEVAL else self.lens.topk_probs_b
        k = min(k, ids.shape[-1])
        return [[(self.lens_token(ids[r, t, j]), float(probs[r, t, j])) for j in range(k)] for r in range(ids.shape[0])]

    def first_divergent_row(self, t: int = 0) -> int | None:
        """The first hidden-state row (0 = emb) whose logit-lens top-1 differs between the paths at ``t``."""
        t = self._position(t)
        rows = np.nonzero(self.lens.topk_ids_a[:, t, 0] != self.lens.topk_ids_b[:, t, 0])[0]
        return int(rows[0]) if rows.size else None

    def settled_row(self, t: int = 0) -> int | None:
        """The row from which on (to the last layer) the retrieval path's logit-lens top-1 is answer token t."""
        t = self._position(t)
        if t >= len(self.answer_token_ids):
            return None
        hits = self.lens.topk_ids_a[:, t, 0] == self.answer_token_ids[t]
        row = None
        for r in range(hits.size - 1, -1, -1):
            if not hits[r]:
                break
            row = r
        return row

    def summary(self, tau: float = RADAR_TAU) -> dict[str, Any]:
        """A compact JSON-ready summary (the ``internals`` block of ``python -m core probe --json``).

        Per layer (index 0 = embeddings, ℓ + 1 = decoder layer ℓ) at the last prompt token: ‖d_ℓ‖ and the
        logit-lens KL; the same averaged over the answer positions; per path the attention entropy maps at
        the first answer step and averaged over the answer, the specialised-head counts at ``τ`` and RADAR's
        D.2.1 features, and the attention mass on each segment per layer (mean over heads and answer).
        """
        norms = self.disp_norm
        lens_top1_rag = self.lens.topk_ids_a[:, 0, 0]
        lens_top1_para = self.lens.topk_ids_b[:, 0, 0]
        attention: dict[str, Any] = {"tau": float(tau), "segments": list(SEGMENTS)}
        for path in PATHS:
            first, mean = self.entropy_at(path, 0), self.entropy_at(path, "mean")
            attention[path] = {
                "entropy_first": first.round(6).tolist(),
                "entropy_answer_mean": mean.round(6).tolist(),
                "mean_entropy_per_layer_first": first.mean(axis=1).round(6).tolist(),
                "specialised_heads_first": specialised_heads(first, tau),
                "specialised_heads_answer_mean": specialised_heads(mean, tau),
                "radar_features_answer_mean": attention_specialisation(mean, tau),
                "segment_mass_per_layer_answer_mean": {
                    seg: self.mass_at(path, seg, "mean").mean(axis=1).round(6).tolist() for seg in SEGMENTS
                },
            }
        attention[RETRIEVAL]["context_mass_answer_mean"] = self.mass_at(RETRIEVAL, "context", "mean").round(6).tolist()
        return {
            "layers": self.n_layers,
            "heads": self.n_heads,
            "positions": self.n_positions,
            "layer_index": "0 = embeddings, l + 1 = output of decoder layer l",
            "l2_norm": norms[:, 0].round(6).tolist(),
            "l2_norm_answer_mean": norms.mean(axis=1).round(6).tolist(),
            "logit_lens_kl": self.lens.kl[:, 0].astype(np.float64).round(6).tolist(),
            "logit_lens_kl_answer_mean": self.lens.kl.astype(np.float64).mean(axis=1).round(6).tolist(),
            "logit_lens_top1_rag": [self.lens_token(i) for i in lens_top1_rag],
            "logit_lens_top1_para": [self.lens_token(i) for i in lens_top1_para],
            "first_row_top1_differs": self.first_divergent_row(0),
            "row_retrieval_top1_settles_on_answer": self.settled_row(0),
            "attention": attention,
        }


def analyse(
    handle: ModelHandle, result: DualPathResult, *, top_k: int = 10, progress: Progress | None = None
) -> Internals:
    """Run one instrumented forward per path over prompt + answer[:-1] and the logit lens of both.

    Args:
        handle: the model that produced ``result``.
        result: a dual-path result (its prompts are rebuilt with the engine and checked).
        top_k: logit-lens candidates kept per layer and position.
        progress: ``progress(done, total, label)`` after each of the three steps.

    Returns:
        :class:`Internals`; peak extra memory is one layer's ``(H, T, T)`` attention plus
        ``2 × (L + 1) × P × d`` floats of hidden states.
    """
    if result.model != handle.info.name:
        raise ValueError(f"This result was produced by {result.model!r}, but the loaded model is {handle.info.name!r}.")
    prepared = _prepared_for(handle, result)
    answer = [int(i) for i in result.answer_token_ids]
    n_pos = max(1, len(answer))
    fed = answer[:-1]
    sequences: dict[str, tuple[list[int], list[int], int]] = {}
    for path, ids in ((RETRIEVAL, prepared.retrieval.ids), (PARAMETRIC, prepared.parametric.ids)):
        segs = prompt_segments(handle, prepared, path) + [ANSWER] * len(fed)
        sequences[path] = (list(ids) + fed, segs, len(ids))
    captures: dict[str, ForwardCapture] = {}
    step = 0

    def report(label: str) -> None:
        nonlocal step
        step += 1
        if progress is not None:
            progress(step, 3, label)

    with handle.lock:
        for path in PATHS:
            seq, segs, plen = sequences[path]
            rows = [plen - 1 + t for t in range(n_pos)]
            captures[path] = instrumented_forward(
                handle, seq, positions=rows, attention=True, rows=rows, segment_ids=segs
            )
            report(f"{path} path: hidden states and attention")
        lens = logit_lens_compare(
            handle, captures[RETRIEVAL].states, captures[PARAMETRIC].states, targets=answer, top_k=top_k
        )
        report("logit lens")
    unique = np.unique(np.concatenate([lens.topk_ids_a.ravel(), lens.topk_ids_b.ravel()]))
    lens_tokens = dict(zip(unique.tolist(), handle.decode_tokens(unique.tolist()), strict=True))
    rag, para = captures[RETRIEVAL], captures[PARAMETRIC]
    disp = (rag.states.astype(np.float64) - para.states.astype(np.float64)).astype(np.float32)
    return Internals(
        model=handle.info.name,
        n_layers=handle.info.n_layers,
        n_heads=handle.info.n_heads,
        hidden_size=handle.info.hidden_size,
        answer_tokens=list(result.answer_tokens),
        answer_token_ids=answer,
        rag_prompt_len=sequences[RETRIEVAL][2],
        para_prompt_len=sequences[PARAMETRIC][2],
        rag_tokens=handle.decode_tokens(sequences[RETRIEVAL][0]),
        para_tokens=handle.decode_tokens(sequences[PARAMETRIC][0]),
        rag_segments=np.asarray(sequences[RETRIEVAL][1], dtype=np.int8),
        para_segments=np.asarray(sequences[PARAMETRIC][1], dtype=np.int8),
        entropy_rag=rag.entropy,  # type: ignore[arg-type]
        entropy_para=para.entropy,  # type: ignore[arg-type]
        mass_rag=rag.mass,  # type: ignore[arg-type]
        mass_para=para.mass,  # type: ignore[arg-type]
        displacement=disp,
        hidden_norm_rag=np.linalg.norm(rag.states.astype(np.float64), axis=-1).astype(np.float32),
        hidden_norm_para=np.linalg.norm(para.states.astype(np.float64), axis=-1).astype(np.float32),
        lens=lens,
        lens_tokens=lens_tokens,
    )


def path_sequence(handle: ModelHandle, result: DualPathResult, path: str) -> tuple[list[int], list[str], int]:
    """The token ids one path's instrumented forward runs on (prompt + answer[:-1]), their tokens, and the
    prompt length."""
    if path not in PATHS:
        raise ValueError(f"path must be {RETRIEVAL!r} or {PARAMETRIC!r}, got {path!r}")
    prepared = _prepared_for(handle, result)
    prompt = prepared.retrieval.ids if path == RETRIEVAL else prepared.parametric.ids
    ids = list(prompt) + [int(i) for i in result.answer_token_ids[:-1]]
    return ids, handle.decode_tokens(ids), len(prompt)


def attention_pattern(handle: ModelHandle, ids: Sequence[int], layer: int, head: int) -> np.ndarray:
    """The full ``(T, T)`` attention weights of one head (row i = query i, column j = key j), float32.

    Only this head's matrix is kept; one forward pass with a hook on the one attention module.
    """
    capture = instrumented_forward(handle, ids, head=(layer, head))
    if capture.pattern is None:  # pragma: no cover - the hook always fires for a valid layer
        raise ValueError(f"no attention captured for layer {layer}, head {head}")
    return capture.pattern
