"""Hook plumbing for the interventions: reading and replacing a layer's output, token positions, patch sites,
and counting hooks (tests use the counters to prove that nothing is left behind).

Nothing here registers a hook: :mod:`core.methods.ablation.interventions` and
:mod:`core.methods.ablation.capture` build registrations for :meth:`core.model.handle.ModelHandle.hooked`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch

HOOK_MARK = "_read_or_recall_intervention"
"""Attribute set on every hook function this package registers (lets tests find leftovers)."""

_F = TypeVar("_F", bound=Callable[..., Any])


def mark(fn: _F) -> _F:
    """Tag a hook function with :data:`HOOK_MARK` (see :func:`count_intervention_hooks`)."""
    setattr(fn, HOOK_MARK, True)
    return fn


def with_hidden(output: Any, hidden: torch.Tensor) -> Any:
    """A decoder layer's ``output`` (a tensor, or a tuple/list starting with one) with its hidden states replaced."""
    if torch.is_tensor(output):
        return hidden
    return type(output)([hidden, *output[1:]]) if isinstance(output, tuple) else [hidden, *output[1:]]


def token_positions(kwargs: dict[str, Any], hidden: torch.Tensor) -> torch.Tensor:
    """Position ids ``(B, S)`` (CPU, long) of the tokens in this forward, as a decoder layer receives them.

    Args:
        kwargs: the layer's keyword arguments (``position_ids``, else ``cache_position``, else the cache length).
        hidden: the layer's output ``(B, S, d)``.

    Raises:
        RuntimeError: position ids that do not match the forward's length.
    """
    batch, seq = hidden.shape[0], hidden.shape[1]
    pos = kwargs.get("position_ids")
    if pos is None:
        pos = kwargs.get("cache_position")
    if pos is None:
        past = _cache_length(kwargs.get("past_key_values"))
        pos = torch.arange(past, past + seq)
    pos = torch.as_tensor(pos).detach().to("cpu", torch.long)
    if pos.ndim == 3:  # multimodal rotary variants: (3, B, S); the first is the text position
        pos = pos[0]
    if pos.ndim == 1:
        pos = pos.unsqueeze(0)
    if pos.shape[-1] != seq:
        raise RuntimeError(f"position ids of length {pos.shape[-1]} for a forward over {seq} tokens")
    return pos.expand(batch, seq)


def find_patch_sites(args: tuple[Any, ...], kwargs: dict[str, Any], target_ids: Sequence[int]) -> list[tuple[int, int]]:
    """The ``(row, column)`` where each row of a decoder forward ends the target prompt at its last position.

    A row qualifies when the token at position id ``len(target) − 1`` closes a stretch equal to the whole
    target prompt (the generation's prefill, a teacher-forced pass over prompt + answer); decoding steps and
    other prompts do not.

    Args:
        args, kwargs: the arguments of the decoder module's forward (``input_ids``, ``position_ids``,
            ``past_key_values``).
        target_ids: the target (retrieval) prompt.
    """
    input_ids = kwargs.get("input_ids")
    if input_ids is None and args and torch.is_tensor(args[0]) and not args[0].is_floating_point():
        input_ids = args[0]
    if input_ids is None:
        return []
    ids = input_ids.detach().to("cpu")
    position_ids = kwargs.get("position_ids")
    if position_ids is None:
        past = _cache_length(kwargs.get("past_key_values"))
        pos = torch.arange(past, past + ids.shape[1]).unsqueeze(0)
    else:
        pos = position_ids.detach().to("cpu", torch.long)
        pos = pos[0] if pos.ndim == 3 else pos
    pos = pos.expand(ids.shape[0], ids.shape[1])
    target = torch.tensor(list(target_ids), dtype=ids.dtype)
    last = len(target) - 1
    sites: list[tuple[int, int]] = []
    for row in range(ids.shape[0]):
        for col in (pos[row] == last).nonzero().flatten().tolist():
            if col >= last and torch.equal(ids[row, col - last : col + 1], target):
                sites.append((row, col))
                break
    return sites


def count_hooks(module: torch.nn.Module) -> int:
    """All forward/backward (pre-)hooks on ``module`` and every submodule (ours and anyone else's)."""
    total = 0
    for m in module.modules():
        for name in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks"):
            total += len(getattr(m, name, {}) or {})
    return total


def count_intervention_hooks(module: torch.nn.Module) -> int:
    """Hooks registered by this package (marked with :data:`HOOK_MARK`) left on ``module`` or a submodule."""
    total = 0
    for m in module.modules():
        for name in ("_forward_hooks", "_forward_pre_hooks"):
            total += sum(1 for fn in (getattr(m, name, {}) or {}).values() if getattr(fn, HOOK_MARK, False))
    return total


def _cache_length(cache: Any) -> int:
    """Tokens already in a KV cache (0 without one)."""
    return int(cache.get_seq_length()) if cache is not None and hasattr(cache, "get_seq_length") else 0
