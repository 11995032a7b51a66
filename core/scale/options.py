"""The ``--ray`` / ``--workers`` flags of ``evaluate``, ``ablate --sweep`` and ``detect``, and their runs.

This module never imports Ray at import time (the commands import it always); Ray is imported only when a
command runs with ``--ray``, inside the functions below. Each function connects
(:func:`core.scale.cluster.connect`), shows a progress bar on stderr (done / total and per minute), runs the
job, prints one line with the workers and the retries, and disconnects.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from tqdm import tqdm

from core.engine import DualPathSettings
from core.evaluation.evaluate import EvaluateOptions
from core.model.progress import Progress
from core.scale.cluster import AUTO
from core.scale.spec import ModelSpec


def add_ray_args(p: argparse.ArgumentParser, what: str = "scoring") -> None:
    """``--ray [auto|local|ADDRESS]`` and ``--workers N``."""
    p.add_argument(
        "--ray",
        nargs="?",
        const=AUTO,
        default=None,
        metavar="auto|local|ADDRESS",
        help=f"run the {what} on Ray actors, one model per worker: 'auto' (the default of a bare --ray: "
        "RAY_ADDRESS or a Ray running here, else a Ray started here), 'local', or a head node's HOST:PORT / "
        "ray://HOST:PORT (put --ray after the positional arguments)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="Ray actors (default: one per GPU of the cluster, else one per CPU, at most 8); needs --ray",
    )


def check_ray_args(args: argparse.Namespace) -> None:
    """``--workers`` only with ``--ray``, and at least 1.

    Raises:
        ValueError: the message names the flag.
    """
    if args.workers is not None and args.ray is None:
        raise ValueError("--workers needs --ray")
    if args.workers is not None and args.workers < 1:
        raise ValueError(f"--workers must be at least 1, got {args.workers}")


def spec_from_args(args: argparse.Namespace) -> ModelSpec:
    """The :class:`ModelSpec` of ``--model`` / ``--revision`` / ``--device`` / ``--dtype``."""
    return ModelSpec(model=args.model, revision=args.revision, device=args.device, dtype=args.dtype)


@contextmanager
def progress_bar(total: int, unit: str = "row", desc: str = "ray") -> Iterator[Progress]:
    """A tqdm bar on stderr showing done / total and the rate per minute; yields a
    :class:`~core.model.progress.Progress` (a ``total`` that differs from the bar's replaces it)."""
    t0 = time.perf_counter()
    with tqdm(total=total, desc=desc, unit=unit, file=sys.stderr) as bar:

        def update(done: int, total_now: int, text: str = "") -> None:
            if bar.total != total_now:  # a total known only once the run is planned
                bar.total = total_now
            elapsed = time.perf_counter() - t0
            if elapsed > 0:
                rate = f"{done / elapsed * 60:.1f} {unit}s/min"
                bar.set_postfix_str(f"{text} · {rate}" if text else rate, refresh=False)
            bar.update(done - bar.n)

        yield update


def evaluate_from_args(
    args: argparse.Namespace, rows: Sequence[Any], settings: DualPathSettings, options: EvaluateOptions
) -> dict[str, Any]:
    """``evaluate --ray``: :func:`core.scale.ray_eval.evaluate_on_ray` with the command's flags and the
    ``options`` the local :func:`core.evaluation.evaluate_rows` would get.

    Raises:
        ClusterError (a ValueError): Ray cannot be reached or cannot place the workers.
    """
    check_ray_args(args)
    from core.scale.cluster import connect, disconnect
    from core.scale.ray_eval import evaluate_on_ray

    session = connect(args.ray)
    try:
        with progress_bar(len(rows)) as progress:
            report = evaluate_on_ray(
                spec_from_args(args), list(rows), settings, options, workers=args.workers, progress=progress
            )
    finally:
        disconnect(session)
    report["ray"]["address"] = session.address
    sys.stderr.write(_stats_line(report["ray"], "rows") + "\n")
    return report


def sweep_from_args(args: argparse.Namespace, sweep: dict[str, Any]) -> dict[str, Any]:
    """``ablate --sweep --ray``: :func:`core.methods.ablation.layer_sweep` with its scoring runs on Ray
    (:class:`core.scale.ray_sweep.RaySweepRunner`); the grid's dict plus ``"ray"``.

    ``sweep`` (``query``, ``context``, ``settings``, ``eps``, ``seeds``, ``layers``, ``max_new_tokens``) is what
    the local run gets.

    Raises:
        ValueError: ``--ray`` without ``--sweep`` (only the single-layer sweep runs on Ray), bad layers/ε/seeds;
            ClusterError as :func:`evaluate_from_args`.
    """
    check_ray_args(args)
    if not args.sweep:
        raise ValueError("--ray runs the single-layer sweep (--sweep) on Ray; the other experiments run locally")
    from core.methods.ablation import layer_sweep
    from core.scale.cluster import connect, disconnect
    from core.scale.ray_sweep import RaySweepRunner
    from core.scale.spec import planning_handle

    spec = spec_from_args(args)
    session = connect(args.ray)
    try:
        with progress_bar(0, unit="run") as progress:
            runner = RaySweepRunner(spec, workers=args.workers, progress=progress)
            grid = layer_sweep(planning_handle(spec), runner=runner, **sweep)
    finally:
        disconnect(session)
    report = grid.to_dict()
    report["ray"] = {**runner.stats.to_dict(), "address": session.address}  # type: ignore[union-attr]
    sys.stderr.write(_stats_line(report["ray"], "runs") + "\n")
    return report


def sma_runner_from_args(args: argparse.Namespace) -> Any:
    """``detect --ray``: connect and return a :class:`core.scale.ray_sma.RaySMARunner` for the ``sma`` detector
    (Ray stays connected until the process exits).

    Raises:
        ClusterError as :func:`evaluate_from_args`.
    """
    check_ray_args(args)
    from core.scale.cluster import connect
    from core.scale.ray_sma import RaySMARunner

    session = connect(args.ray)
    runner = RaySMARunner(spec_from_args(args), workers=args.workers)
    runner.address = session.address  # type: ignore[attr-defined]
    return runner


def sma_report(runner: Any) -> dict[str, Any] | None:
    """The ``"ray"`` entry of ``detect --ray`` (``None`` when SMA did not run), and its line on stderr."""
    if runner.stats is None:
        return None
    out = {**runner.stats.to_dict(), "local_batches": runner.local_batches, "address": runner.address}
    sys.stderr.write(_stats_line(out, "batches of generations") + "\n")
    return out


def _stats_line(stats: dict[str, Any], unit: str) -> str:
    return (
        f"ray ({stats.get('address', '')}): {stats['workers']} {stats['device']} worker(s), {stats['items']} {unit} "
        f"in {stats['seconds']:.1f} s ({stats['items_per_minute']:.1f}/min); {stats['actor_restarts']} actor "
        f"restart(s), {stats['batch_retries']} batch re-run(s)"
    )
