"""This machine's pace per parameter: what a model's first run is estimated from before any run of it.

A decoding step of a causal LM on a CPU reads every weight once (a matrix–vector product per layer), so its time
grows about with the parameter count; so does a prompt's forward, per token. :mod:`core.engine.estimate` keeps
its measured costs per model; a model with none yet borrows another model's, scaled by the two parameter counts,
and before any model has run at all, :func:`machine_pace` times a tiny matrix–vector product (a few
milliseconds, once per process) and turns it into seconds per decoding step per parameter with
:data:`STEP_PER_MATVEC`, the ratio measured on this project's development machine (a step of the embedded model
against the same product: see docs/performance.md#estimates). No model call, no hook.
"""

from __future__ import annotations

import threading
import time
from typing import Any

MATVEC = 1024
"""The side of the square matrix :func:`machine_pace` multiplies by a vector (1 M float32 weights, 4 MB)."""
REPEATS = 40
STEP_PER_MATVEC = 25.0
"""A decoding step of one sequence per parameter ÷ the matrix–vector product's time per weight: the Python,
attention, norms and sampling around the weights' reads (the embedded model, 2-core CPU, one thread: 24–31× a
1024² product per weight; 0.44 s a step of both paths)."""
PROMPT_TOKEN_PER_STEP = 0.05
"""A prompt token read in a forward pass ÷ a decoding step, when neither has been measured on any model (the
forward reads its weights once for all the prompt's tokens)."""

_lock = threading.Lock()
_pace: list[float] = []


def _time_matvec() -> float:
    """Seconds per weight of a float32 matrix–vector product, the fastest of :data:`REPEATS` (one torch call
    each; the fastest is the machine, the others its load)."""
    import torch

    weights = torch.randn(MATVEC, MATVEC)
    vector = torch.randn(1, MATVEC)
    best = float("inf")
    with torch.inference_mode():
        for _ in range(REPEATS):
            start = time.perf_counter()
            _ = vector @ weights
            best = min(best, time.perf_counter() - start)
    return best / (MATVEC * MATVEC)


def machine_pace(timer: Any = None) -> float:
    """Seconds per decoding step of one sequence per parameter on this machine, from a tiny matrix–vector
    product timed once per process (``timer``: a replacement for tests, seconds per weight)."""
    with _lock:
        if not _pace:
            _pace.append((timer or _time_matvec)() * STEP_PER_MATVEC)
        return _pace[0]


def reset() -> None:
    """Forget the measured pace (tests)."""
    with _lock:
        _pace.clear()


def parameter_count(handle: Any) -> int | None:
    """How many parameters ``handle``'s model has (``None`` for a handle without a model, e.g. a string key)."""
    model = getattr(handle, "model", None)
    params = getattr(model, "parameters", None)
    if params is None:
        return None
    try:
        return int(sum(p.numel() for p in params())) or None
    except (TypeError, AttributeError):
        return None
