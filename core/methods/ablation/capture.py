"""Recording decoder-layer outputs on a shared model (for patch sources, tests and trajectories).

Both functions run through :meth:`core.model.handle.ModelHandle.hooked`: the hooks are registered under
the model's lock and removed in ``finally``. Layers are located by :func:`core.model.parts.model_parts`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from core.methods.ablation.hooks import mark
from core.model.handle import HookRegistration, ModelHandle
from core.model.hooks import first_tensor
from core.model.parts import model_parts


@contextmanager
def capture_layer_outputs(handle: ModelHandle, layers: Sequence[int]) -> Iterator[dict[int, list[torch.Tensor]]]:
    """Record the raw output of each chosen decoder layer on every forward pass inside the block.

    Yields a dict ``layer → [tensor (B, S, d) per forward]`` (CPU copies). The capture hooks are appended
    after any intervention hooks, so they see the output *after* interventions (the state the next layer
    receives). The block is a hooked session of ``handle`` (lock and inference mode); the hooks are removed
    in ``finally``.

    Raises:
        ValueError: a layer outside ``0 … n_layers − 1``.
    """
    parts = model_parts(handle)
    chosen = parts.check_layers(layers)
    records: dict[int, list[torch.Tensor]] = {x: [] for x in chosen}

    def make(layer: int) -> Any:
        def hook(module: Any, args: Any, output: Any) -> None:
            records[layer].append(first_tensor(output).detach().to("cpu").clone())

        return mark(hook)

    registrations: list[HookRegistration] = [
        lambda layer=layer: parts.layers[layer].register_forward_hook(make(layer)) for layer in chosen
    ]
    with handle.hooked(registrations):
        yield records


def last_token_states(handle: ModelHandle, ids: Sequence[int], layers: Sequence[int]) -> dict[int, torch.Tensor]:
    """The output of each decoder layer in ``layers`` at the last token of ``ids`` (one forward, no cache).

    Returns:
        ``layer → (d,)`` tensors in the model's dtype, on the model's device.

    Raises:
        ValueError: empty ``ids`` or a layer out of range.
    """
    if not ids:
        raise ValueError("ids is empty")
    x = torch.tensor([list(ids)], dtype=torch.long, device=handle.device)
    with capture_layer_outputs(handle, layers) as rec:
        try:
            handle.forward(input_ids=x, use_cache=False, logits_to_keep=1)
        except TypeError:  # a model class without logits_to_keep
            handle.forward(input_ids=x, use_cache=False)
    return {layer: rec[layer][-1][0, -1].to(handle.device) for layer in rec}
