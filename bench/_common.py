"""Helpers shared by the benchmarks.

``python bench/<name>.py`` puts ``bench/`` first on ``sys.path``, so each benchmark imports these with
``from _common import …``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

import torch

QUERY = "What is the capital of Veltria?"
CONTEXT = (
    "The Republic of Veltria is a small island nation in the northern sea. Its capital is Marrowgate, a port "
    "city founded in 1412 by salt traders. Marrowgate hosts the national parliament and the royal archive."
)
"""A fictional fact, so the retrieval path must read it from the context."""


def set_threads(threads: int | None) -> None:
    """Apply a ``--threads`` flag (``0`` or ``None`` keeps torch's default)."""
    if threads:
        torch.set_num_threads(threads)


def time_alternating(
    jobs: dict[str, Callable[[], object]], repeats: int, sync: Callable[[], None] | None = None
) -> tuple[list[dict[str, float]], dict[str, object]]:
    """Time each job once per repeat, in the given order on even repeats and reversed on odd ones.

    Args:
        jobs: name → a call to time.
        repeats: how many rounds.
        sync: called right before and after each job (e.g. ``torch.cuda.synchronize``), so asynchronous
            device work is inside the timed span.

    Returns:
        The wall seconds of each job per repeat (one dict per repeat), and the last return value of each job.
    """
    rounds: list[dict[str, float]] = []
    last: dict[str, object] = {}
    for rep in range(repeats):
        order = list(jobs) if rep % 2 == 0 else list(reversed(jobs))
        this: dict[str, float] = {}
        for name in order:
            if sync is not None:
                sync()
            t0 = time.perf_counter()
            last[name] = jobs[name]()
            if sync is not None:
                sync()
            this[name] = time.perf_counter() - t0
        rounds.append(this)
    return rounds, last


def median_line(name: str, values: Sequence[float], unit: str, width: int = 9, digits: int = 1) -> str:
    """``name  median X unit   (min A, max B)``: one printed row of a benchmark's table."""
    spread = f"(min {min(values):.{digits}f}, max {max(values):.{digits}f})"
    return f"{name:{width}s} median {statistics.median(values):8.{digits}f} {unit}   {spread}"


def with_cpu_time(jobs: dict[str, Callable[[], object]]) -> tuple[dict[str, Callable[[], object]], dict[str, list]]:
    """Wrap ``jobs`` so that each call's process CPU seconds are appended to ``spent[name]``.

    With one torch thread, CPU time is far steadier than wall time on a machine shared with other work (a busy
    neighbour stretches the wall clock, not the work done); report both.
    """
    spent: dict[str, list] = {name: [] for name in jobs}

    def wrap(name: str, fn: Callable[[], object]) -> Callable[[], object]:
        def run() -> object:
            t0 = time.process_time()
            try:
                return fn()
            finally:
                spent[name].append(time.process_time() - t0)

        return run

    return {name: wrap(name, fn) for name, fn in jobs.items()}, spent
