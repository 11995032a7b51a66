"""The audit's model calls: one forward pass per path over a left-padded batch of prompts, nothing generated.

For B (query, context) pairs the audit runs **two** forward passes — the B retrieval prompts (with the context)
in one left-padded batch, then the B parametric prompts (without it), each holding the model on its own (so other
clients take turns between them) — through :func:`core.model.trace.trace`,
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
import time
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from core.audit.budget import MAX_FORWARD_TOKENS, RunShare, WorkMeter
from core.engine.batch import plan_batches
from core.engine.prepare import PreparedPrompts
from core.maths.divergence import entropy, kl_divergence, log_probs
from core.methods.internals.replay import pair_displacement, trace_prompts
from core.model.handle import ModelHandle, check_cancelled
from core.model.trace import trace

DEFAULT_AUDIT_BATCH = 16
"""Most pairs per padded forward of ``/audit/batch``."""
MAX_AUDIT_BATCH_TOKENS = MAX_FORWARD_TOKENS
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
    meter: WorkMeter | None = None,
    share: RunShare | None = None,
) -> list[PairCapture]:
    """Both paths' last-token states for many pairs: per chunk one padded forward per path.

    Chunks group pairs of similar retrieval-prompt length (:func:`core.engine.batch.plan_batches`), at most
    ``batch_size`` pairs and ``max_batch_tokens`` padded tokens each; results come back in input order. Each
    forward pass holds the model on its own (:meth:`~core.model.handle.ModelHandle.session`), so another
    client's run can take its turn between any two of them; the run's cancel token (a deadline, a shutdown) is
    checked before each.

    Args:
        prepared: each pair's validated prompts (:func:`core.engine.prepare.prepare_prompts`).
        meter: when given, chunks are also sized to one fair slice of model time
            (:meth:`~core.audit.budget.WorkMeter.forward_tokens`) and every forward's time is fed back to it.
        share: the audit's :class:`~core.audit.budget.RunShare`: each forward pass waits for its turn among the
            service's audits (the one with the least work left goes first).

    Returns:
        One :class:`PairCapture` per pair.

    Raises:
        core.model.handle.RunCancelled: the run's cancel token fired (between forward passes, or while queued).
    """
    if not prepared:
        return []
    out: list[PairCapture | None] = [None] * len(prepared)
    lengths = [len(p.retrieval.ids) for p in prepared]
    if meter is not None:
        max_batch_tokens = min(max_batch_tokens, meter.forward_tokens(max(lengths)))
    for chunk in plan_batches(lengths, batch_size, 0, max_batch_tokens):
        with_context, without = trace_prompts(  # the one prompt-pair trace, each forward timed on its own
            handle, [prepared[i] for i in chunk], tracer=lambda rows: _timed_trace(handle, rows, meter, share)
        )
        logp_c, logp_0 = log_probs(with_context.logits[:, -1]).cpu(), log_probs(without.logits[:, -1]).cpu()
        disp = pair_displacement(with_context, without)
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


def _timed_trace(
    handle: ModelHandle, sequences: list[list[int]], meter: WorkMeter | None, share: RunShare | None
) -> Any:
    """One padded forward (:func:`~core.model.trace.trace`) holding the model for itself (in the audit's turn,
    given ``share``), its time (from when it holds the model, not while it queued) reported to ``meter``."""
    check_cancelled()
    rows, width = len(sequences), max(len(s) for s in sequences)
    with share.forward(rows, width) if share is not None else nullcontext(), handle.session():
        t0 = time.perf_counter()
        traced = trace(handle, sequences, logits=1)
        seconds = time.perf_counter() - t0
    if meter is not None:
        meter.observe(rows, width, seconds)
    return traced


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
