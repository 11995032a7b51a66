"""The audit's model calls: one forward pass per path over a left-padded batch of prompts, nothing generated.

For B (query, context) pairs the audit runs **two** forward passes — the B retrieval prompts (with the context)
in one left-padded batch, then the B parametric prompts (without it) — through :func:`core.model.trace.trace`,
keeping only each row's residual stream at its last prompt token (CRM §2: ``h_ℓ^c`` and ``h_ℓ^0``) and the
next-token logits there. The trace pads, masks and passes explicit ``position_ids`` once for every reader; when
all rows have the same length (one pair, say) it passes no mask, so the computation is exactly
:func:`core.methods.internals.layer_states`'.

What one pass per path gives for free, besides CRM's displacement d_ℓ = h_ℓ^c − h_ℓ^0 (eq. 1): the two paths'
distributions of the **first answer token**, hence KL(P_rag,1 ‖ P_para,1) (RePCS eq. 2 at t = 1, nats), both
entropies and both greedy first tokens — without generating anything.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from core.engine.batch import plan_batches
from core.engine.prepare import PreparedPrompts
from core.maths.divergence import entropy, kl_divergence, log_probs
from core.model.handle import ModelHandle
from core.model.trace import displacement, trace

DEFAULT_AUDIT_BATCH = 16
"""Most pairs per padded forward of ``/audit/batch``."""
MAX_AUDIT_BATCH_TOKENS = 8192
"""Most padded prompt tokens per forward pass (rows × widest prompt): bounds the activations' memory."""


@dataclass
class PairCapture:
    """What the two forward passes keep for one pair (CPU numpy).

    Attributes:
        displacement: ``(L1, d)`` float32 d_ℓ = h_ℓ(retrieval)[last] − h_ℓ(parametric)[last]; row 0 is the
            embedding output, row ℓ + 1 decoder layer ℓ (before the final norm).
        first_token_kl: KL(P_rag ‖ P_para) of the first answer token's distributions, nats (float32 maths).
        entropy_retrieval, entropy_parametric: their entropies, nats.
        top_retrieval, top_parametric: each path's most likely first answer token id.
        n_retrieval, n_parametric: the prompts' lengths in tokens.
    """

    displacement: np.ndarray
    first_token_kl: float
    entropy_retrieval: float
    entropy_parametric: float
    top_retrieval: int
    top_parametric: int
    n_retrieval: int
    n_parametric: int


def capture_pairs(
    handle: ModelHandle,
    prepared: Sequence[PreparedPrompts],
    *,
    batch_size: int = DEFAULT_AUDIT_BATCH,
    max_batch_tokens: int = MAX_AUDIT_BATCH_TOKENS,
) -> list[PairCapture]:
    """Both paths' last-token states for many pairs: per chunk one padded forward per path.

    Chunks group pairs of similar retrieval-prompt length (:func:`core.engine.batch.plan_batches`), at most
    ``batch_size`` pairs and ``max_batch_tokens`` padded tokens each; results come back in input order. A
    chunk's two passes run in one :meth:`~core.model.handle.ModelHandle.session`, so no other caller's run
    interleaves with them.

    Args:
        prepared: each pair's validated prompts (:func:`core.engine.prepare.prepare_prompts`).

    Returns:
        One :class:`PairCapture` per pair.
    """
    if not prepared:
        return []
    out: list[PairCapture | None] = [None] * len(prepared)
    chunks = plan_batches([len(p.retrieval.ids) for p in prepared], batch_size, 0, max_batch_tokens)
    for chunk in chunks:
        with handle.session():
            with_context = trace(handle, [prepared[i].retrieval.ids for i in chunk], logits=1)
            without = trace(handle, [prepared[i].parametric.ids for i in chunk], logits=1)
        logp_c, logp_0 = log_probs(with_context.logits[:, -1]).cpu(), log_probs(without.logits[:, -1]).cpu()
        disp = displacement(with_context, without)
        kl = kl_divergence(logp_c, logp_0).tolist()
        ent_c, ent_0 = entropy(logp_c).tolist(), entropy(logp_0).tolist()
        top_c, top_0 = logp_c.argmax(-1).tolist(), logp_0.argmax(-1).tolist()
        for j, i in enumerate(chunk):
            out[i] = PairCapture(
                displacement=disp[j],
                first_token_kl=float(kl[j]),
                entropy_retrieval=float(ent_c[j]),
                entropy_parametric=float(ent_0[j]),
                top_retrieval=int(top_c[j]),
                top_parametric=int(top_0[j]),
                n_retrieval=len(prepared[i].retrieval.ids),
                n_parametric=len(prepared[i].parametric.ids),
            )
    return out  # type: ignore[return-value]


def model_fingerprint(handle: ModelHandle, rows: int = 64) -> str:
    """A short fingerprint of the loaded weights: SHA-256 of the first ``rows`` rows of the input embedding
    (cast to float16, so fp32 / fp16 / bf16 loads of one checkpoint agree) and the model's shape.

    A calibration records it, and a server refuses a calibration whose fingerprint differs: the same display
    name can hide another checkpoint, and another name can be the same weights (a moved folder).
    """
    with handle.session():
        weight = handle.model.get_input_embeddings().weight
        block = weight[:rows].detach().to(torch.float16).cpu().numpy()
    info = handle.info
    digest = hashlib.sha256(f"{info.n_layers}|{info.hidden_size}|{info.vocab_size}|".encode())
    digest.update(block.tobytes())
    return digest.hexdigest()[:32]
