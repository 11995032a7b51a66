"""The seeded noise of CRM §4.4 and appendix J, h′ = h + ε · σ(h) · N(0, 1) (pure: tensors in, tensors out).

* σ(h): CRM appendix J calls it "the per-layer activation standard deviation, computed batch-wise", i.e.
  one scalar over the whole batch tensor. That scalar depends on what else is in the batch (padding, the
  other path's row, the prompt length) and, under token-by-token generation with a KV cache, on how the
  forward was chunked — so the same token would get a different noise scale in a batched and an unbatched
  run. We therefore use **σ per token over the hidden dimension** (population standard deviation,
  ``correction=0``, float32): each position gets noise of the same relative size ε against its own
  activation scale, independent of batching, padding and chunking. (In residual streams with a few
  "massive activation" positions a batch-wise scalar would be dominated by those positions.)
* N(0, 1): a vector in R^d drawn for each ``(seed, layer, position)`` from a seeded
  :class:`torch.Generator` — never the global RNG. ``position`` is the token's position id in its own
  sequence (0 = first prompt token, left padding excluded, as the model's rotary embeddings see it).
  Noise is generated in blocks of :data:`NOISE_BLOCK` positions: block ``k`` of layer ``ℓ`` is
  ``randn(NOISE_BLOCK, d)`` from a generator seeded with ``SeedSequence([seed, ℓ, k])``, and position ``p``
  takes row ``p mod NOISE_BLOCK`` of block ``p // NOISE_BLOCK``. So the noise at a position never depends on
  how the forward pass was chunked (one prefill + token-by-token decoding gives the same noise as one full
  teacher-forced pass), on batching, or on the other path.
* "Same seed on both paths": both paths see the same noise *field* z(seed, ℓ, p). Positions they share —
  the common prompt prefix (chat template, system text) — get identical noise; because the retrieval prompt
  is longer, the answer tokens sit at different positions on the two paths and get different draws from
  the same field, as two separately seeded forward passes of the paper would.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

NOISE_BLOCK = 64
"""Positions per independently seeded block of the noise field."""


def block_seed(seed: int, layer: int, block: int) -> int:
    """A 64-bit generator seed for one block, mixed from (seed, layer, block) by NumPy's SeedSequence."""
    return int(np.random.SeedSequence([int(seed), int(layer), int(block)]).generate_state(1, dtype=np.uint64)[0])


def noise_block(seed: int, layer: int, block: int, hidden_size: int) -> torch.Tensor:
    """Block ``block`` of the noise field of ``layer``: ``(NOISE_BLOCK, hidden_size)`` float32 N(0, 1) on CPU."""
    gen = torch.Generator(device="cpu").manual_seed(block_seed(seed, layer, block))
    return torch.randn((NOISE_BLOCK, hidden_size), generator=gen, dtype=torch.float32)


def noise_field(seed: int, layer: int, positions: Sequence[int] | torch.Tensor, hidden_size: int) -> torch.Tensor:
    """z(seed, layer, p) for each position ``p``: shape ``(len(positions), hidden_size)``, float32, CPU.

    Deterministic and independent of how positions are grouped: the value for ``p`` is row
    ``p mod NOISE_BLOCK`` of :func:`noise_block` ``(seed, layer, p // NOISE_BLOCK)``.

    Raises:
        ValueError: a negative position.
    """
    pos = torch.as_tensor(positions, dtype=torch.long).reshape(-1)
    if pos.numel() and int(pos.min()) < 0:
        raise ValueError("positions must be >= 0")
    out = torch.empty((pos.numel(), hidden_size), dtype=torch.float32)
    for block in torch.unique(pos // NOISE_BLOCK).tolist():
        rows = (pos // NOISE_BLOCK) == block
        out[rows] = noise_block(seed, layer, block, hidden_size)[pos[rows] % NOISE_BLOCK]
    return out


class NoiseTable:
    """The noise field of one seed, cached per layer as a growing ``(n_positions, d)`` table.

    Args:
        seed: the field's seed.
        hidden_size: d.
    """

    def __init__(self, seed: int, hidden_size: int) -> None:
        self.seed = seed
        self.hidden_size = hidden_size
        self._tables: dict[int, torch.Tensor] = {}

    def lookup(self, layer: int, positions: torch.Tensor) -> torch.Tensor:
        """z for a ``(B, S)`` tensor of positions: ``(B, S, d)`` float32 on CPU."""
        if positions.numel() == 0:
            return torch.zeros((*positions.shape, self.hidden_size), dtype=torch.float32)
        needed = int(positions.max()) + 1
        table = self._tables.get(layer, torch.empty((0, self.hidden_size), dtype=torch.float32))
        if needed > table.shape[0]:
            first, n_blocks = table.shape[0] // NOISE_BLOCK, -(-needed // NOISE_BLOCK)
            new = [noise_block(self.seed, layer, k, self.hidden_size) for k in range(first, n_blocks)]
            table = torch.cat([table, *new], dim=0)
            self._tables[layer] = table
        return table[positions]


def token_sigma(hidden: torch.Tensor) -> torch.Tensor:
    """σ(h) per token: the population standard deviation over the hidden dimension, float32, ``(..., 1)``."""
    return hidden.float().std(dim=-1, keepdim=True, correction=0)


def apply_noise(hidden: torch.Tensor, z: torch.Tensor, eps: float) -> torch.Tensor:
    """h′ = h + ε · σ(h) · z, computed in float32 and returned in ``hidden``'s dtype.

    Args:
        hidden: ``(..., d)`` layer output.
        z: ``(..., d)`` standard normal draws (same leading shape).
        eps: ε ≥ 0.

    Returns:
        ``(..., d)``, the dtype and device of ``hidden``.
    """
    h32 = hidden.float()
    return (h32 + eps * token_sigma(h32) * z.to(device=h32.device, dtype=torch.float32)).to(hidden.dtype)
