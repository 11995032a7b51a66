"""The logit lens of both paths, compared layer by layer (CRM appendix F's logit-lens baseline).

Each layer's state is read through the model's final norm and unembedding, ``P_ℓ = softmax(W_U · norm(h_ℓ))``
(:func:`core.model.lens.lens_log_probs`), and the two paths are compared per layer with
KL(P_retrieval,ℓ ‖ P_parametric,ℓ). At the last layer this is exactly the model's own output.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from core.engine.result import PARAMETRIC, PATHS, RETRIEVAL
from core.maths.divergence import entropy, kl_divergence
from core.model.handle import ModelHandle
from core.model.lens import lens_log_probs, lens_rows_per_chunk

DEFAULT_CHUNK = 64
"""(layer, position) rows :func:`logit_lens_compare` projects at once unless the vocabulary makes that too large."""


@dataclass
class LensPath:
    """The logit lens of one path (float32 numpy; ``L1 = n_layers + 1`` rows, ``P`` positions, top-``k``).

    Attributes:
        entropy: ``(L1, P)`` entropy of the lens distribution in nats.
        topk_ids: ``(L1, P, k)`` int64 top-k token ids; ``topk_probs`` ``(L1, P, k)`` their probabilities.
        target_logprob: ``(L1, P)`` log-probability of the target token at each position (NaN where no target
            is given).
    """

    entropy: np.ndarray
    topk_ids: np.ndarray
    topk_probs: np.ndarray
    target_logprob: np.ndarray

    def target_probability(self) -> np.ndarray:
        """``(L1, P)`` probability of the target token, ``exp(target_logprob)`` (NaN where no target is given)."""
        return np.exp(self.target_logprob)


@dataclass
class LensComparison:
    """The logit lens of both paths at the same positions.

    Attributes:
        kl: ``(L1, P)`` KL(P_retrieval,ℓ ‖ P_parametric,ℓ) in nats, float32.
        retrieval, parametric: each path's :class:`LensPath`.
    """

    kl: np.ndarray
    retrieval: LensPath
    parametric: LensPath

    def path(self, name: str) -> LensPath:
        """``retrieval`` or ``parametric``."""
        if name not in PATHS:
            raise ValueError(f"path must be {RETRIEVAL!r} or {PARAMETRIC!r}, got {name!r}")
        return self.retrieval if name == RETRIEVAL else self.parametric


def logit_lens_compare(
    handle: ModelHandle,
    retrieval: np.ndarray,
    parametric: np.ndarray,
    *,
    targets: Sequence[int] | None = None,
    top_k: int = 10,
    chunk: int | None = None,
) -> LensComparison:
    """Compare two paths layer by layer through the logit lens (CRM appendix F's logit-lens baseline).

    Args:
        retrieval, parametric: ``(n_layers + 1, P, d)`` hidden states of the two paths at aligned positions.
        targets: ``P`` token ids (or fewer: the rest get NaN) whose log-probability is reported per layer.
        top_k: candidates kept per layer and position.
        chunk: (layer, position) rows projected at once; bounds memory to ``chunk × V`` floats per path
            while reading the unembedding matrix only ``⌈L1·P / chunk⌉`` times. Default: 64, fewer when 64 rows of
            the vocabulary would exceed :data:`core.model.lens.LENS_CHUNK_BYTES` (16 rows for Gemma 3's 262,144
            tokens; the embedded model's 49,152 keep 64).

    Returns:
        A :class:`LensComparison`; KL is KL(P_retrieval ‖ P_parametric) over the full vocabulary, float32
        log-space.

    Raises:
        ValueError: states of different or non-3-D shapes, ``top_k < 1`` or ``chunk < 1``.
    """
    a, b = np.asarray(retrieval), np.asarray(parametric)
    if a.ndim != 3 or a.shape != b.shape:
        raise ValueError(f"states must both be (layers + 1, P, d) of one shape, got {a.shape} and {b.shape}")
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    if chunk is None:
        chunk = min(DEFAULT_CHUNK, lens_rows_per_chunk(handle))
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    n_l, n_p, dim = a.shape
    n_rows = n_l * n_p
    k = min(top_k, handle.info.vocab_size)
    flat = {RETRIEVAL: a.reshape(n_rows, dim), PARAMETRIC: b.reshape(n_rows, dim)}
    tgt = np.full(n_p, -1, np.int64)
    if targets is not None:
        t = [int(x) for x in targets][:n_p]
        tgt[: len(t)] = t
    tgt_rows = np.tile(tgt, n_l)  # row r = layer * P + position
    kl = np.zeros(n_rows, np.float32)
    out = {
        path: LensPath(
            entropy=np.zeros(n_rows, np.float32),
            topk_ids=np.zeros((n_rows, k), np.int64),
            topk_probs=np.zeros((n_rows, k), np.float32),
            target_logprob=np.full(n_rows, np.nan, np.float32),
        )
        for path in PATHS
    }
    with handle.session():
        for s in range(0, n_rows, chunk):
            e = min(n_rows, s + chunk)
            lp = {path: lens_log_probs(handle, flat[path][s:e]) for path in PATHS}
            kl[s:e] = kl_divergence(lp[RETRIEVAL], lp[PARAMETRIC]).cpu().numpy()
            has = tgt_rows[s:e] >= 0
            sel = torch.as_tensor(np.where(has, tgt_rows[s:e], 0), device=lp[RETRIEVAL].device).unsqueeze(-1)
            for path in PATHS:
                lens = out[path]
                lens.entropy[s:e] = entropy(lp[path]).cpu().numpy()
                values, idx = torch.topk(lp[path], k, dim=-1)
                lens.topk_ids[s:e] = idx.cpu().numpy()
                lens.topk_probs[s:e] = values.exp().cpu().numpy()
                picked = lp[path].gather(-1, sel).squeeze(-1).cpu().numpy()
                lens.target_logprob[s:e] = np.where(has, picked, np.nan)
            del lp

    def grid(x: np.ndarray) -> np.ndarray:
        return x.reshape(n_l, n_p, *x.shape[1:])

    paths = {
        path: LensPath(*(grid(x) for x in (p.entropy, p.topk_ids, p.topk_probs, p.target_logprob)))
        for path, p in out.items()
    }
    return LensComparison(grid(kl), paths[RETRIEVAL], paths[PARAMETRIC])
