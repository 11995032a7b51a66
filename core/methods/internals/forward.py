"""The instrumented forward: one pass over a sequence with hooks that keep only what the views need.

* **hidden states** at a few positions: ``states[0]`` is the input of decoder layer 0 (the embedding output,
  what ``hidden_states[0]`` holds in transformers) and ``states[ℓ + 1]`` is the output of decoder layer ℓ
  (before the final norm, for every layer including the last);
* **attention**, reduced inside the hook of each attention module, one layer at a time: the entropy of every
  query row, ``H_{ℓ,h}(i) = −Σ_j A_{ℓ,h}(i, j) log A_{ℓ,h}(i, j)`` (nats; RADAR appendix D.2.1), and the
  attention mass that chosen query rows put on each token segment. The full ``(heads, T, T)`` weights of a
  layer live only while its hook runs; only the single head a user opens is ever kept whole
  (:func:`attention_pattern`). A full layers × heads × T × T stack is never built.

The hooks come from :mod:`core.model.hooks` and run inside :meth:`core.model.handle.ModelHandle.hooked` (the
model's lock and inference mode; every hook removed in ``finally``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from core.methods.internals.segments import SEGMENTS
from core.model.handle import ModelHandle
from core.model.trace import AttentionReducer, check_positions, head_pattern, query_entropy, segment_mass, trace


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
    """One forward pass over ``ids`` (:func:`core.model.trace.trace`) with attention reduced as it goes.

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
    ids = [int(i) for i in ids]
    if not ids:
        raise ValueError("ids is empty: the forward pass needs at least one token")
    T = len(ids)
    n_layers = handle.info.n_layers
    if rows is not None:
        rows = check_positions(rows, T, "row")
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

    reducers: dict[str, AttentionReducer] = {}
    if attention:
        reducers["entropy"] = query_entropy()
        if rows is not None and segment_ids is not None:
            reducers["mass"] = segment_mass(rows, segment_ids, n_segments)
    if head is not None:
        reducers["pattern"] = head_pattern(*head)
    layers = list(range(n_layers)) if attention else [head[0]] if head is not None else None
    t = trace(
        handle,
        [ids],
        positions=positions if positions is not None else [-1],
        attention=reducers or None,
        attention_layers=layers,
    )
    out = ForwardCapture(states=t.residual[0].numpy().astype(np.float32, copy=False))
    if attention:
        out.entropy = np.stack(t.attention["entropy"][0]).astype(np.float32, copy=False)
        if rows is not None:
            out.mass = np.stack(t.attention["mass"][0]).astype(np.float32, copy=False)
    if head is not None:
        out.pattern = t.attention["pattern"][0][head[0]]
    return out


def layer_states(handle: ModelHandle, ids: Sequence[int], positions: Sequence[int] | None = None) -> np.ndarray:
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


def attention_pattern(handle: ModelHandle, ids: Sequence[int], layer: int, head: int) -> np.ndarray:
    """The full ``(T, T)`` attention weights of one head (row i = query i, column j = key j), float32.

    Only this head's matrix is kept; one forward pass with a hook on the one attention module.
    """
    capture = instrumented_forward(handle, ids, head=(layer, head))
    if capture.pattern is None:  # pragma: no cover - the hook always fires for a valid layer
        raise ValueError(f"no attention captured for layer {layer}, head {head}")
    return capture.pattern
