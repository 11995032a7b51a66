"""Recording decoder-layer outputs on a shared model (for patch sources, tests and trajectories).

Both functions run through :meth:`core.model.handle.ModelHandle.hooked`: the hooks are registered under
the model's lock and removed in ``finally``. Layers are located by :func:`core.model.parts.model_parts`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch

from core.model.handle import ModelHandle
from core.model.hooks import residual_hooks
from core.model.parts import model_parts
from core.model.trace import trace


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

    def on_state(index: int, hidden: torch.Tensor) -> None:
        records[index - 1].append(hidden.detach().to("cpu").clone())

    with handle.hooked(residual_hooks(parts, on_state, rows=[x + 1 for x in chosen])):
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
    chosen = model_parts(handle).check_layers(layers)
    states = trace(handle, [ids]).residual[0][:, 0]  # (n_layers + 1, d) float32, row ℓ + 1 = layer ℓ
    dtype = next(handle.model.parameters()).dtype
    return {layer: states[layer + 1].to(device=handle.device, dtype=dtype) for layer in chosen}
