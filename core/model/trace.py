"""The one door into a model's internals: one batched forward that keeps only what the caller asked for.

In the spirit of llm-transparency-tool's ``TransparentLlm`` (run once, then read ``residual(layer)``,
``attention(...)``): :func:`trace` runs **one** forward pass over one or more token sequences and returns a
:class:`Trace` holding

* the **residual stream** at chosen positions, one numbering everywhere: row 0 is the embedding output (the
  input of decoder layer 0), row ``ℓ + 1`` the output of decoder layer ℓ. Rows are read by hooks on the decoder
  layers, so the last row is the raw residual stream *before* the final norm (transformers 5 returns
  ``hidden_states[-1]`` already normed for Llama-style models; this row is the norm's input);
* **attention reduced on the fly** by caller-supplied reducers (:data:`AttentionReducer`): a layer's
  ``(H, T, T)`` weights of one sequence live only while its hook runs, so no layers × heads × T × T stack is
  ever built (ask :func:`head_pattern` for one head's whole matrix). Ready-made reducers: :func:`query_entropy`,
  :func:`segment_mass`, :func:`lookback_ratio`, :func:`top_attended`, :func:`head_pattern`;
* the **input and output of each layer's MLP** at the same positions (a logit lens before and after the MLP:
  see :func:`residual_before_mlp`);
* **logits** of the last ``k`` positions, only when asked (``logits_to_keep`` where the model has it).

Padding is handled once, here: sequences of different lengths are left-padded (:func:`left_pad`) with an
attention mask and explicit ``position_ids`` (a plain ``model(...)`` call does not derive them from the mask);
positions are given per sequence, unpadded, and negative indices count from each sequence's end. Sequences of
equal length run unpadded, with no mask. The pass holds the handle's lock (:meth:`ModelHandle.hooked`) and every
hook comes from :mod:`core.model.hooks` and is removed in ``finally``.

Reading hooks live nowhere else; interventions (noise, patching) keep their own context managers, registered
through the same :meth:`ModelHandle.hooked`, and a trace run inside one reads the perturbed model.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from core.model.handle import HookRegistration, ModelHandle
from core.model.hooks import attention_hooks, module_io_hooks, residual_hooks
from core.model.parts import layer_mlps, model_parts

AttentionReducer = Callable[[int, torch.Tensor], Any]
"""``reduce(layer, w)`` with ``w`` one sequence's float32 attention weights at decoder layer ``layer``, shape
``(H, T, T)`` (row i = query i, column j = key j; padding already removed). Return something small (or ``None``
for a layer it does not want): the value is kept, ``w`` is not."""

ALL = "all"
"""``positions=ALL``: keep every position of each sequence."""


@dataclass
class Trace:
    """What one :func:`trace` kept, per sequence ``b`` (CPU, float32 unless noted).

    Attributes:
        lengths: each sequence's length ``T_b``.
        positions: each sequence's kept positions (``0 … T_b − 1``), in the order asked.
        residual: per sequence ``(n_layers + 1, P, d)``: row 0 the embedding output, ``ℓ + 1`` decoder layer ℓ's
            output (before the final norm); empty when not asked.
        mlp_in, mlp_out: per sequence ``(n_layers, P, d)``: each layer's MLP input (after its pre-MLP norm) and
            output (before it is added to the residual stream); empty when not asked.
        attention: ``name → [per sequence: [per decoder layer: the reducer's value, or None for a layer not
            hooked]]``.
        logits: ``(B, k, V)`` logits of each sequence's last ``k`` positions (model dtype, on the model's
            device), or ``None``.
    """

    lengths: list[int]
    positions: list[list[int]]
    residual: list[torch.Tensor] = field(default_factory=list)
    mlp_in: list[torch.Tensor] = field(default_factory=list)
    mlp_out: list[torch.Tensor] = field(default_factory=list)
    attention: dict[str, list[list[Any]]] = field(default_factory=dict)
    logits: torch.Tensor | None = None

    def residual_array(self) -> np.ndarray:
        """The residual stream of every sequence as one float32 array ``(B, n_layers + 1, P, d)`` (every
        sequence must keep the same number of positions)."""
        return torch.stack(self.residual).numpy()


def left_pad(rows: Sequence[Sequence[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Left-pad token rows into ``(input_ids, attention_mask, position_ids)``, each ``(B, W)`` long.

    ``position_ids`` are ``cumsum(mask) − 1`` and 0 on pad positions, so a row's real tokens get positions
    ``0 … len − 1`` whatever the padding.

    Raises:
        ValueError: no rows, or an empty row.
    """
    if not rows or any(len(r) == 0 for r in rows):
        raise ValueError("every row needs at least one token")
    width = max(len(r) for r in rows)
    ids = torch.tensor([[pad] * (width - len(r)) + list(r) for r in rows], dtype=torch.long)
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], dtype=torch.long)
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
    return ids, mask, positions


def takes_logits_to_keep(model: torch.nn.Module) -> bool:
    """Whether the model's ``forward`` has a ``logits_to_keep`` parameter (most transformers 5 causal LMs)."""
    return "logits_to_keep" in inspect.signature(model.forward).parameters


def run_model(model: torch.nn.Module, keep: int, **inputs: torch.Tensor) -> Any:
    """``model(**inputs, use_cache=False)`` materializing the logits of the last ``keep`` positions only, where the
    model's class allows it (else all of them); call inside a model session. The one place that knows about
    models without ``logits_to_keep``."""
    if takes_logits_to_keep(model):
        return model(**inputs, use_cache=False, logits_to_keep=max(1, int(keep)))
    return model(**inputs, use_cache=False)


def _check_ids(handle: ModelHandle, sequences: Sequence[Sequence[int]]) -> list[list[int]]:
    if not sequences:
        raise ValueError("no sequence to trace")
    out = [[int(i) for i in seq] for seq in sequences]
    if any(not seq for seq in out):
        raise ValueError("ids is empty: the forward pass needs at least one token")
    vocab = int(handle.model.get_input_embeddings().weight.shape[0])
    for seq in out:
        bad = [i for i in seq if not 0 <= i < vocab]
        if bad:
            raise ValueError(f"token ids out of the vocabulary range [0, {vocab}): {bad[:5]}")
    return out


def check_positions(positions: Sequence[int], length: int, name: str = "position") -> list[int]:
    """``positions`` as indices ``0 … length − 1`` (negative ones count from the end).

    Raises:
        ValueError: an empty list or an index outside the sequence.
    """
    out = []
    for p in positions:
        p = int(p)
        if not -length <= p < length:
            raise ValueError(f"{name} {p} is outside a sequence of {length} tokens")
        out.append(p % length)
    if not out:
        raise ValueError(f"{name} is empty")
    return out


def trace(
    handle: ModelHandle,
    sequences: Sequence[Sequence[int]],
    *,
    positions: Sequence[int] | Sequence[Sequence[int]] | str | None = None,
    residual: bool = True,
    mlp: bool = False,
    attention: Mapping[str, AttentionReducer | Sequence[AttentionReducer | None]] | None = None,
    attention_layers: Sequence[int] | None = None,
    logits: int = 0,
    right_pad: bool = False,
) -> Trace:
    """One forward pass over ``sequences`` that keeps only what is asked (see the module docstring).

    Args:
        handle: the shared model (eager attention for the attention reducers).
        sequences: B token-id sequences (each non-empty); of different lengths they are left-padded.
        positions: the positions of each sequence whose residual stream and MLP input/output are kept
            (default: the last token; negative indices count from the end; :data:`ALL`: every position), or one
            such list per sequence.
        residual: keep the residual stream.
        mlp: keep each layer's MLP input and output.
        attention: ``name → reducer`` applied to every sequence, or ``name → [one reducer per sequence]`` (``None``
            for a sequence it does not read: its value stays ``None``).
        attention_layers: the decoder layers whose attention is reduced (default: all).
        logits: keep the logits of each sequence's last ``logits`` positions (0: none; left padding only).
        right_pad: pad shorter sequences on the right instead, with no attention mask: a causal model's real
            tokens never see the padding after them, so each sequence reads what it reads alone (for a batch of
            unrelated texts whose logits are not asked).

    Returns:
        A :class:`Trace`.

    Raises:
        ValueError: bad ids, positions or layers; an MLP the locator cannot find; a model that returns no
            attention weights (load it with ``attn_implementation="eager"``); or a model whose decoder layers
            the forward pass did not reach.
    """
    seqs = _check_ids(handle, sequences)
    lengths = [len(s) for s in seqs]
    width, batch = max(lengths), len(seqs)
    pads = [width - n for n in lengths]
    keep = _kept_positions(positions, lengths)
    parts = model_parts(handle)
    n_layers = parts.n_layers
    reducers = {name: _per_sequence(name, fn, batch) for name, fn in (attention or {}).items()}
    layers = parts.check_layers(range(n_layers) if attention_layers is None else attention_layers)
    if logits < 0:
        raise ValueError(f"logits must be >= 0, got {logits}")
    if right_pad and logits:
        raise ValueError("logits are kept for left-padded batches only")
    starts = [0] * batch if right_pad else pads
    out = Trace(lengths=lengths, positions=keep)
    out.attention = {name: [[None] * n_layers for _ in range(batch)] for name in reducers}
    sink = _Sink(out, starts, n_layers, reducers)
    registrations: list[HookRegistration] = [
        *(residual_hooks(parts, sink.on_state) if residual else []),
        *(module_io_hooks(layer_mlps(parts), sink.on_mlp) if mlp else []),
        *(attention_hooks(parts, sink.on_weights, layers) if reducers else []),
    ]
    inputs = _inputs(handle, seqs, right_pad)
    with handle.hooked(registrations) as model:
        result = run_model(model, logits, **inputs)
        if logits:
            out.logits = result.logits[:, -logits:]
    del result
    if residual:
        out.residual = _stack(sink.states, "decoder layers")
    if mlp:
        out.mlp_in, out.mlp_out = _stack(sink.mlp_io["in"], "MLPs"), _stack(sink.mlp_io["out"], "MLPs")
    return out


class _Sink:
    """Where :func:`trace`'s hooks put what they read: each kept position's residual stream and MLP
    input/output (per sequence, ``(P, d)`` float32 on the CPU) and the attention reducers' values (into
    ``out.attention``, this layer's weights only, the sequence's padding cut off)."""

    def __init__(
        self, out: Trace, starts: list[int], n_layers: int, reducers: dict[str, list[AttentionReducer | None]]
    ) -> None:
        self.out, self.reducers = out, reducers
        self.spans = [(start, start + n) for start, n in zip(starts, out.lengths)]
        self.columns = [torch.tensor([s + p for p in ps], dtype=torch.long) for s, ps in zip(starts, out.positions)]
        self.states: list[list[torch.Tensor] | None] = [None] * (n_layers + 1)
        self.mlp_io: dict[str, list[list[torch.Tensor] | None]] = {"in": [None] * n_layers, "out": [None] * n_layers}

    def pick(self, h: torch.Tensor) -> list[torch.Tensor]:  # (B, W, d) → per sequence (P, d) float32 CPU
        return [h[b, cols.to(h.device)].float().cpu() for b, cols in enumerate(self.columns)]

    def on_state(self, index: int, h: torch.Tensor) -> None:
        self.states[index] = self.pick(h)

    def on_mlp(self, kind: str, layer: int, h: torch.Tensor) -> None:
        self.mlp_io[kind][layer] = self.pick(h)

    def on_weights(self, layer: int, w: torch.Tensor) -> None:  # (B, H, W, W), this layer only
        for b, (start, end) in enumerate(self.spans):
            if all(fns[b] is None for fns in self.reducers.values()):
                continue  # no reducer for this sequence: its weights are not even copied
            row = w[b, :, start:end, start:end].float()
            for name, fns in self.reducers.items():
                if fns[b] is not None:
                    self.out.attention[name][b][layer] = fns[b](layer, row)


def _kept_positions(
    positions: Sequence[int] | Sequence[Sequence[int]] | str | None, lengths: list[int]
) -> list[list[int]]:
    """Each sequence's kept positions: :data:`ALL`, one list for every sequence, or one list per sequence."""
    if positions == ALL:
        return [list(range(n)) for n in lengths]
    wanted = [-1] if positions is None else list(positions)  # type: ignore[arg-type]
    if wanted and not isinstance(wanted[0], (int, np.integer)):
        if len(wanted) != len(lengths):
            raise ValueError(f"{len(wanted)} position lists for {len(lengths)} sequences")
        return [check_positions(p, n) for p, n in zip(wanted, lengths)]  # type: ignore[arg-type]
    return [check_positions(wanted, n) for n in lengths]  # type: ignore[arg-type]


def _per_sequence(
    name: str, fn: AttentionReducer | Sequence[AttentionReducer | None], batch: int
) -> list[AttentionReducer | None]:
    if callable(fn):
        return [fn] * batch
    fns = list(fn)
    if len(fns) != batch:
        raise ValueError(f"attention reducer {name!r}: {len(fns)} reducers for {batch} sequences")
    return fns


def _inputs(handle: ModelHandle, seqs: list[list[int]], right_pad: bool = False) -> dict[str, torch.Tensor]:
    device = handle.device
    if len({len(s) for s in seqs}) == 1 or right_pad:
        width = max(len(s) for s in seqs)
        rows = [s + [handle.pad_token_id] * (width - len(s)) for s in seqs]
        return {"input_ids": torch.tensor(rows, dtype=torch.long, device=device)}
    ids, mask, positions = left_pad(seqs, handle.pad_token_id)
    return {"input_ids": ids.to(device), "attention_mask": mask.to(device), "position_ids": positions.to(device)}


def _stack(rows: list[list[torch.Tensor] | None], what: str) -> list[torch.Tensor]:
    if any(r is None for r in rows):
        raise ValueError(f"The forward pass did not reach every one of the {what} (unsupported model layout).")
    return [torch.stack([r[b] for r in rows]) for b in range(len(rows[0]))]  # type: ignore[index]


def residual_before_mlp(t: Trace, b: int = 0) -> torch.Tensor:
    """The residual stream just before each layer's MLP, ``(n_layers, P, d)``: ``h_{ℓ+1} − mlp_out_ℓ``.

    Valid for sequential blocks (``h ← h + attn(norm(h)); h ← h + mlp(norm(h))``: Llama, Mistral, Qwen, GPT-2 …);
    not for parallel-residual blocks (GPT-NeoX, GPT-J). With ``t.residual[b][1:]`` it gives the logit lens before
    and after each MLP.
    """
    if not t.residual or not t.mlp_out:
        raise ValueError("residual_before_mlp needs a trace with residual=True and mlp=True")
    return t.residual[b][1:] - t.mlp_out[b]


# -- reducers ----------------------------------------------------------------------------------------------


def query_entropy() -> AttentionReducer:
    """``H_{ℓ,h}(i) = −Σ_j A(i, j) log A(i, j)`` of every query row (nats; RADAR D.2.1) → ``(H, T)`` float32 numpy."""
    return lambda layer, w: torch.special.entr(w).sum(dim=-1).cpu().numpy()


def segment_mass(rows: Sequence[int], segment_ids: Sequence[int], n_segments: int) -> AttentionReducer:
    """The attention mass that query ``rows`` put on each of ``n_segments`` key segments → ``(H, R, S)`` numpy.

    Args:
        rows: query positions (``0 … T − 1``).
        segment_ids: the segment (``0 … n_segments − 1``) of each of the T tokens.
    """
    onehot_cpu = torch.nn.functional.one_hot(torch.as_tensor(np.asarray(segment_ids)), n_segments).float()
    rows_cpu = torch.tensor(list(rows), dtype=torch.long)

    def reduce(layer: int, w: torch.Tensor) -> np.ndarray:
        onehot, r = onehot_cpu.to(w.device), rows_cpu.to(w.device)
        return torch.einsum("hrt,ts->hrs", w[:, r, :], onehot).cpu().numpy()

    return reduce


def lookback_ratio(context: Sequence[bool], answer_start: int, *, produced: bool = False) -> AttentionReducer:
    """The Lookback Lens' per-head ratio at answer query positions → ``(H, R)`` float32 numpy.

    ``LR_h(q) = A_ctx / (A_ctx + A_new)`` with ``A_ctx`` the mean attention of query ``q`` on the context tokens
    (``context[j]`` true) and ``A_new`` its mean attention on the answer tokens ``answer_start … q`` (Chuang et
    al. 2024, eq. 1: at generation step t the query is the last token, and the "new" tokens are those generated
    so far, the query's own token included). Each mean is over its segment's tokens, so segment length does not
    decide the ratio. ``0/0`` gives 0.

    Args:
        context: one flag per token: is token j part of the context.
        answer_start: the first answer position.
        produced: ``False`` (default): the queries ``answer_start … T − 1`` (``R = T − answer_start``).
            ``True``: the queries that *produce* each answer token under teacher forcing over prompt +
            answer[:-1], ``answer_start − 1 … T − 1`` (``R = T − answer_start + 1`` = the answer's length); the
            first of them (the last prompt token, which produces answer token 0) has no earlier answer token, so
            ``A_new`` is undefined there and its ratio is NaN.
    """
    ctx_cpu = torch.as_tensor(list(context), dtype=torch.bool)
    if not bool(ctx_cpu.any()):
        raise ValueError("lookback_ratio needs at least one context token")
    first = answer_start - 1 if produced else answer_start

    def reduce(layer: int, w: torch.Tensor) -> np.ndarray:
        T = w.shape[-1]
        if not 0 <= first < T or answer_start > T:
            raise ValueError(f"answer_start {answer_start} is outside a sequence of {T} tokens")
        ctx = ctx_cpu.to(w.device)
        q = w[:, first:, :]  # (H, R, T)
        a_ctx = q[..., ctx].mean(dim=-1)
        steps = torch.arange(first, T, device=w.device)
        keys = torch.arange(T, device=w.device)
        new = (keys[None, :] >= answer_start) & (keys[None, :] <= steps[:, None])  # (R, T)
        count = new.sum(-1)
        a_new = (q * new).sum(-1) / count.clamp_min(1)
        total = a_ctx + a_new
        ratio = torch.where(total > 0, a_ctx / total.clamp_min(1e-30), 0.0)
        ratio = torch.where(count > 0, ratio, float("nan"))
        return ratio.cpu().numpy()

    return reduce


def top_attended(k: int, rows: Sequence[int]) -> AttentionReducer:
    """The ``k`` most attended key positions of each query in ``rows`` → ``(positions (H, R, k) int64, weights
    (H, R, k) float32)`` numpy."""

    def reduce(layer: int, w: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        r = torch.tensor(list(rows), dtype=torch.long, device=w.device)
        values, ids = torch.topk(w[:, r, :], min(k, w.shape[-1]), dim=-1)
        return ids.cpu().numpy().astype(np.int64), values.cpu().numpy()

    return reduce


def head_pattern(layer: int, head: int) -> AttentionReducer:
    """One head's whole ``(T, T)`` attention matrix at one layer (float32 numpy; ``None`` at other layers) — the
    only reducer that keeps T × T values."""

    def reduce(at: int, w: torch.Tensor) -> np.ndarray | None:
        return w[head].cpu().numpy().astype(np.float32, copy=True) if at == layer else None

    return reduce


def displacement(with_context: Trace, without: Trace, position: int = 0) -> np.ndarray:
    """CRM's displacement ``d_ℓ = h_ℓ^c − h_ℓ^0`` (CRM §2, eq. 1) between two traces of as many sequences.

    Args:
        with_context, without: traces with the residual stream (e.g. of the retrieval and the parametric prompts).
        position: the index into each trace's kept positions (default the first; CRM reads the last prompt
            token, the default position of :func:`trace`).

    Returns:
        float32 ``(B, n_layers + 1, d)``, the difference taken in float64; row 0 is the embedding output.
    """
    if len(with_context.residual) != len(without.residual) or not with_context.residual:
        raise ValueError("displacement needs two traces of the residual stream over as many sequences")
    h_c = np.stack([r[:, position].numpy() for r in with_context.residual]).astype(np.float64)
    h_0 = np.stack([r[:, position].numpy() for r in without.residual]).astype(np.float64)
    return (h_c - h_0).astype(np.float32)
