"""Keep a long CPU run's resident memory at what it holds, not at what glibc's heap has fragmented into.

A recorded generation (:mod:`core.model.recording`) keeps thousands of small tensors (each decode step's residual,
MLP and attention rows) while the key/value cache is re-allocated a little larger at every step. Under glibc's
default *dynamic* mmap threshold those cache blocks (megabytes) come from the heap once a block that size has been
freed, and the small pieces allocated between them pin the freed holes: the heap grows by about one cache per step.
Measured on the embedded model, one batch of 8 rows × 64 recorded tokens: 9.5 GB peak RSS with the defaults, 1.6 GB
with the threshold fixed at 1 MiB (live data: ~0.2 GB of recordings, 0.55 GB of model). Fixing the threshold (which
also turns the dynamic adjustment off) sends every block ≥ 1 MiB to ``mmap``, returned to the system when freed;
the price is a fresh mapping per block (8 rows × 32 recorded tokens: 16.3 s of generation instead of 14.8 s, for a
1.4 GB peak instead of 6.4 GB).

Fixing the mmap threshold also fixes glibc's *trim* threshold at its default 128 KiB: the heap's free top was given
back to the system after nearly every free, so the next sub-MiB temporary was faulted in again, page by page (a
JSD over the vocabulary in sub-MiB slices: 76,000 page faults and half its time in the kernel). It is fixed at
:data:`TRIM_THRESHOLD_BYTES` with it: at most that much free heap top is kept for reuse, and :func:`release_freed`
still returns every free page after a batch.

Both functions are no-ops where the C library is not glibc (macOS, musl, Windows).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading

logger = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3
"""glibc's ``mallopt`` parameter number for the mmap threshold (``<malloc.h>``)."""
MMAP_THRESHOLD_BYTES = 1 << 20
"""Blocks of at least this size are mmapped (1 MiB: the key/value cache and the logits; the small pieces stay on the
heap)."""

M_TRIM_THRESHOLD = -1
"""glibc's ``mallopt`` parameter number for the trim threshold (``<malloc.h>``)."""
TRIM_THRESHOLD_BYTES = 32 << 20
"""Free memory at the heap's top kept for reuse (32 MiB), not given back after each free."""

_LOCK = threading.Lock()
_APPLIED: list[bool] = []


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


def fix_mmap_threshold(nbytes: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Fix glibc's mmap threshold at ``nbytes`` and its trim threshold at :data:`TRIM_THRESHOLD_BYTES` for this
    process (once; later calls do nothing).

    Returns:
        Whether the threshold is fixed (``False`` where the C library is not glibc).

    Raises:
        ValueError: ``nbytes`` not positive.
    """
    if nbytes <= 0:
        raise ValueError(f"the mmap threshold must be positive, got {nbytes}")
    with _LOCK:
        if _APPLIED:
            return _APPLIED[0]
        libc = _libc()
        ok = bool(libc is not None and libc.mallopt(M_MMAP_THRESHOLD, int(nbytes)) == 1)
        if ok:
            libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)  # type: ignore[union-attr]
            logger.debug("glibc mmap threshold fixed at %d bytes, trim threshold at %d", nbytes, TRIM_THRESHOLD_BYTES)
        _APPLIED.append(ok)
        return ok


def release_freed() -> bool:
    """Return the heap's free pages to the system (glibc ``malloc_trim(0)``); ``True`` when some were released."""
    libc = _libc()
    return bool(libc is not None and libc.malloc_trim(0))
