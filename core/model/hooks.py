"""Hook builders shared by every instrumented forward pass.

Each function here returns *registrations* (zero-argument callables that register one hook and return its
removable handle) for :meth:`core.model.handle.ModelHandle.hooked`, which registers them under the model's
lock and removes every one in ``finally``. The hooks reduce as they go (a layer's ``(H, T, T)`` attention
weights are dropped when its hook returns), so no layers × heads × T × T stack is ever kept.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from core.model.handle import HookRegistration
from core.model.parts import ModelParts

NO_WEIGHTS_MESSAGE = (
    "The model returned no attention weights: load it with attn_implementation='eager' "
    "(SDPA and flash attention do not expose them)."
)


def first_tensor(output: Any) -> torch.Tensor:
    """The hidden states of a module output (decoder layers return a tensor or a tuple starting with one)."""
    return output[0] if isinstance(output, (tuple, list)) else output


def attention_hooks(
    parts: ModelParts,
    on_weights: Callable[[int, torch.Tensor], None],
    layers: Sequence[int] | None = None,
    *,
    require: bool = True,
) -> list[HookRegistration]:
    """Forward hooks on the attention modules that hand each layer's weights to ``on_weights``.

    Args:
        parts: the model's parts.
        on_weights: called as ``on_weights(layer, w)`` with ``w`` the weights of the whole batch, shape
            ``(B, H, T_q, T_k)`` in the model's dtype; reduce them there (they are freed when the hook returns).
        layers: the decoder layers to hook (default: all).
        require: raise ``ValueError`` when a layer returns no weights (else skip that layer silently).
    """
    chosen = range(parts.n_layers) if layers is None else parts.check_layers(layers)

    def make(index: int) -> Callable[..., None]:
        def hook(module: torch.nn.Module, args: Any, output: Any) -> None:
            weights = output[1] if isinstance(output, (tuple, list)) and len(output) > 1 else None
            if weights is None:
                if require:
                    raise ValueError(NO_WEIGHTS_MESSAGE)
                return
            on_weights(index, weights)

        return hook

    return [lambda i=i: parts.attentions[i].register_forward_hook(make(i)) for i in chosen]


def residual_hooks(
    parts: ModelParts,
    on_state: Callable[[int, torch.Tensor], None],
    rows: Sequence[int] | None = None,
) -> list[HookRegistration]:
    """Hooks that hand the residual stream to ``on_state(index, h)`` with ``h`` of shape ``(B, T, d)``.

    ``index`` 0 is the input of decoder layer 0 (the embedding output), ``ℓ + 1`` the output of layer ℓ
    (before the final norm) — the project's hidden-state numbering. ``rows`` limits the hooks to those indices
    (default: all ``n_layers + 1``). The hooks are appended after any already registered (an intervention's
    hooks are prepended), so they read the state the next layer receives.
    """
    chosen = set(range(parts.n_layers + 1) if rows is None else rows)
    bad = sorted(i for i in chosen if not 0 <= i <= parts.n_layers)
    if bad:
        raise ValueError(f"residual row(s) {bad[:5]} out of range 0 … {parts.n_layers}")

    def input_hook(module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        on_state(0, args[0] if args else kwargs["hidden_states"])

    def make(index: int) -> Callable[..., None]:
        def hook(module: torch.nn.Module, args: Any, output: Any) -> None:
            on_state(index + 1, first_tensor(output))

        return hook

    regs: list[HookRegistration] = []
    if 0 in chosen:
        regs.append(lambda: parts.layers[0].register_forward_pre_hook(input_hook, with_kwargs=True))
    regs += [
        lambda i=i: parts.layers[i].register_forward_hook(make(i)) for i in range(parts.n_layers) if i + 1 in chosen
    ]
    return regs


def module_io_hooks(
    modules: Sequence[torch.nn.Module], on_io: Callable[[str, int, torch.Tensor], None], *, inputs: bool = True
) -> list[HookRegistration]:
    """Hooks that hand each module's first input and its output to ``on_io(kind, index, h)``.

    ``kind`` is ``"in"`` (the first positional input, from a pre-hook) or ``"out"`` (the output's hidden states);
    ``index`` the module's place in ``modules`` (e.g. the decoder layer of an MLP). ``inputs=False``: the
    outputs only (no pre-hooks).
    """

    def make_pre(index: int) -> Callable[..., None]:
        def pre_hook(module: torch.nn.Module, args: Any, kwargs: dict) -> None:
            on_io("in", index, args[0] if args else next(iter(kwargs.values())))

        return pre_hook

    def make_post(index: int) -> Callable[..., None]:
        def hook(module: torch.nn.Module, args: Any, output: Any) -> None:
            on_io("out", index, first_tensor(output))

        return hook

    regs: list[HookRegistration] = []
    for i, module in enumerate(modules):
        if inputs:
            regs.append(lambda m=module, i=i: m.register_forward_pre_hook(make_pre(i), with_kwargs=True))
        regs.append(lambda m=module, i=i: m.register_forward_hook(make_post(i)))
    return regs


def input_hook(module: torch.nn.Module, on_input: Callable[[torch.Tensor], None]) -> HookRegistration:
    """A pre-hook that hands ``module``'s first positional input to ``on_input`` (e.g. the final norm's input,
    the raw residual stream after the last layer: transformers 5 replaces ``hidden_states[-1]`` by the normed
    ``last_hidden_state``)."""

    def pre_hook(mod: torch.nn.Module, args: Any) -> None:
        if args and isinstance(args[0], torch.Tensor):
            on_input(args[0])

    return lambda: module.register_forward_pre_hook(pre_hook)
