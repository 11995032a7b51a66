"""ReDeEP's small maths (Sun et al., ICLR 2025, arXiv 2410.11414): tensors in, tensors out, no model, no IO.

* :func:`jsd` — the Jensen–Shannon divergence of two distributions given as log-probabilities, float32
  log-space, nats, a proper sum over the vocabulary (PKS, eq. 5 of the paper);
* :func:`cosine` — row-wise cosine similarity (ECS, eq. 3);
* :func:`n_top` — how many context tokens the top-k % are;
* :func:`copying_score` — Elhage et al.'s (2021) summary of an OV circuit's eigenvalues;
* :func:`pearson` — Pearson correlation of each column of a table with binary labels (the paper's selection).
"""

from __future__ import annotations

import math

import numpy as np
import torch

LOG2 = math.log(2.0)


def jsd(logp: torch.Tensor, logq: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``JSD(p ‖ q) = ½ KL(p ‖ m) + ½ KL(q ‖ m)``, ``m = (p + q) / 2``, in nats, summed over ``dim``.

    Computed in float32 log-space: ``log m = logsumexp(log p, log q) − log 2``; terms with ``p = 0`` (``−inf``)
    contribute 0. Bounded by ``log 2``.

    Args:
        logp, logq: log-probabilities of the same shape ``(..., V)``.

    Returns:
        float32 ``(...)``.
    """
    lp, lq = logp.float(), logq.float()
    if lp.shape != lq.shape:
        raise ValueError(f"jsd needs two distributions of one shape, got {tuple(lp.shape)} and {tuple(lq.shape)}")
    if lp.dim() == 0:
        raise ValueError("jsd needs at least one dimension to sum over")
    lp, lq = lp.movedim(dim, -1), lq.movedim(dim, -1)
    lead, width = lp.shape[:-1], lp.shape[-1]
    flat_p, flat_q = lp.reshape(-1, width), lq.reshape(-1, width)
    # on the CPU each temporary below glibc's mmap threshold; elsewhere (a GPU) one pass, no sync per slice
    rows = max(1, JSD_SLICE_BYTES // max(1, 4 * width)) if lp.device.type == "cpu" else max(1, flat_p.shape[0])
    parts = [_jsd_rows(flat_p[i : i + rows], flat_q[i : i + rows]) for i in range(0, flat_p.shape[0], rows)]
    out = torch.cat(parts) if parts else flat_p.new_zeros(0)
    return out.reshape(lead)


JSD_SLICE_BYTES = 768 << 10
"""Most bytes of one temporary of :func:`jsd` (768 KiB): the rows go through in slices this size, below the 1 MiB
mmap threshold of :func:`core.model.memory.fix_mmap_threshold`, so the temporaries are reused from the heap instead
of being mapped, faulted in and unmapped for every operation (a whole lens chunk at once spent half its time in the
kernel; the sum over each row is the same, slice or not)."""


def _jsd_rows(lp: torch.Tensor, lq: torch.Tensor) -> torch.Tensor:
    logm = torch.logaddexp(lp, lq) - LOG2
    return (0.5 * (_kl_terms(lp, logm).sum(-1) + _kl_terms(lq, logm).sum(-1))).clamp_min(0.0)


def _kl_terms(lp: torch.Tensor, logm: torch.Tensor) -> torch.Tensor:
    """``p · (log p − log m)``, 0 where ``p = 0`` (the mask is applied only when some ``log p`` is ``−inf``: the
    same values, without a pass over the vocabulary when there is none)."""
    terms = lp.exp() * (lp - logm)
    if bool(torch.isneginf(lp).any()):
        terms = torch.where(lp > -math.inf, terms, torch.zeros_like(lp))
    return terms


def cosine(a: torch.Tensor, b: torch.Tensor, dim: int = -1, eps: float = 1e-12) -> torch.Tensor:
    """Cosine similarity of ``a`` and ``b`` along ``dim`` (float32; 0 where either vector is zero)."""
    a, b = a.float(), b.float()
    num = (a * b).sum(dim)
    den = a.norm(dim=dim) * b.norm(dim=dim)
    return torch.where(den > eps, num / den.clamp_min(eps), torch.zeros_like(num))


def n_top(k_percent: float, n_context: int) -> int:
    """The number of context tokens in the top ``k_percent`` %: ``max(1, ⌈k/100 · n_context⌉)``.

    Raises:
        ValueError: ``k_percent`` outside (0, 100] or no context token.
    """
    if not 0.0 < float(k_percent) <= 100.0:
        raise ValueError(f"k_percent must be in (0, 100], got {k_percent}")
    if n_context < 1:
        raise ValueError("ReDeEP's ECS needs at least one context token")
    return max(1, min(n_context, math.ceil(float(k_percent) / 100.0 * n_context - 1e-9)))


def copying_score(eigenvalues: np.ndarray) -> float:
    """``Σ_i λ_i / Σ_i |λ_i|`` (real part of the numerator) over an OV circuit's eigenvalues, in [−1, 1].

    Elhage et al. (2021, "A Mathematical Framework for Transformer Circuits", OV copying): positive eigenvalues
    mean tokens increase their own logits (copying); a score near 1 means the head mostly copies. 0 for an
    all-zero spectrum.
    """
    lam = np.asarray(eigenvalues, dtype=np.complex128)
    total = float(np.abs(lam).sum())
    return float(lam.real.sum() / total) if total > 0 else 0.0


def pearson(table: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Pearson correlation of each column of ``table`` ``(n, m)`` with ``labels`` ``(n,)`` (float64; 0 for a
    constant column).

    Raises:
        ValueError: shapes that do not match, or labels of one value only.
    """
    x = np.asarray(table, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    if x.ndim != 2 or y.shape != (x.shape[0],):
        raise ValueError(f"table must be (n, m) and labels (n,), got {x.shape} and {y.shape}")
    if np.ptp(y) == 0:
        raise ValueError("labels must take two values")
    xc, yc = x - x.mean(0), y - y.mean()
    den = np.sqrt((xc**2).sum(0) * (yc**2).sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (xc * yc[:, None]).sum(0) / den
    return np.where(den > 0, r, 0.0)
