"""Running work items on Ray actors that each load the model once: Ray Data ``map_batches`` over an actor class.

The one engine under :mod:`core.scale.ray_eval`, :mod:`core.scale.ray_sweep` and :mod:`core.scale.ray_sma`:

1. The driver turns the work into *items*, one Ray Dataset row each, with an ``index`` column (the item's
   position in the driver's list), a ``batch`` column (items that must be computed together: one padded batch
   of the local path) and a JSON ``payload``. Each batch is one block of the dataset, so each actor call gets
   whole batches and pads them exactly as the local path does.
2. ``map_batches`` runs :class:`ScaleWorker` on a fixed pool of actors (one GPU each when the cluster has GPUs,
   else one CPU each). An actor loads the model once (:meth:`core.scale.spec.ModelSpec.load`, i.e.
   :func:`core.model.loading.load_model`) and builds the job's handler once; each call scores its batches with
   the handler and returns one JSON result per item.
3. The driver streams the results as they come (the progress callback gets rows done / total), then checks
   that every index came back exactly once and hands back the results in the driver's order.

Fault tolerance is Ray's: Ray Data creates the actors with ``max_restarts=-1`` and ``max_task_retries=-1``,
so an actor that dies is restarted (and loads the model again) and the batches it was running are run again;
a dead batch's partial output is never returned. A small :class:`RunMonitor` actor counts actor starts per
actor id and attempts per batch, so the run reports how many restarts and batch re-runs happened
(:class:`RunStats`).

Payloads and results are JSON text: the data crossing the cluster is plain data, never pickled objects of
ours (Ray pickles the JSON strings' containers and the actor class itself, as it must).
"""

from __future__ import annotations

import importlib
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import ray

from core.model.progress import Progress
from core.scale.cluster import ClusterError, default_workers, resources
from core.scale.spec import ModelSpec

logger = logging.getLogger(__name__)


JOBS = {
    "evaluate": "core.scale.ray_eval:EvaluateHandler",
    "sweep": "core.scale.ray_sweep:SweepHandler",
    "sma": "core.scale.ray_sma:GenerateHandler",
}
"""Job kind → ``module:Class`` of its handler, built once per actor as ``Class(handle, config)`` and called as
``handler(payloads) -> results`` on the payloads of one batch (lists of JSON-ready values, in order)."""


@dataclass
class RunStats:
    """How a Ray run went (the ``"ray"`` entry of the output JSON).

    Attributes:
        workers: actors in the pool; ``device``: ``"cuda"`` (one GPU each) or ``"cpu"`` (one CPU each).
        items: rows (or runs) scored; ``batches``: padded batches they formed.
        actor_restarts: times an actor was started again after it died (Ray's ``max_restarts``).
        batch_retries: batches run more than once (an actor died while running them, Ray's
            ``max_task_retries``); their results were computed again, never returned twice.
        seconds: wall time from submitting to the last result (actor start-up and model loads included).
        startup_s: from submitting until the last actor had its model loaded (the pool's start-up).
        items_per_minute: ``items / seconds × 60``; ``scoring_per_minute``: items per minute after the
            start-up, ``items / (seconds − startup_s) × 60`` (the rate a long run approaches).
    """

    workers: int
    device: str
    items: int
    batches: int
    actor_restarts: int = 0
    batch_retries: int = 0
    seconds: float = 0.0
    startup_s: float = 0.0
    items_per_minute: float = 0.0
    scoring_per_minute: float = 0.0

    @property
    def retries(self) -> int:
        """Actor restarts plus batch re-runs."""
        return self.actor_restarts + self.batch_retries

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "retries": self.retries}


@ray.remote(num_cpus=0, max_restarts=-1)
class RunMonitor:
    """Counts, per run, each actor's starts (by actor id) and each batch's attempts; keeps the actors' handles
    so a caller (a test, an operator) can reach them."""

    def __init__(self) -> None:
        self.starts: dict[str, int] = {}
        self.attempts: dict[int, int] = {}
        self.actors: dict[str, Any] = {}
        self.ready_at: dict[str, float] = {}

    def started(self, actor_id: str, handle: Any) -> None:
        self.starts[actor_id] = self.starts.get(actor_id, 0) + 1
        self.actors[actor_id] = handle

    def ready(self, actor_id: str, at: float) -> None:
        """The actor's model is loaded (``at``: wall-clock seconds, ``time.time()``)."""
        self.ready_at[actor_id] = at

    def attempt(self, batch: int) -> None:
        self.attempts[batch] = self.attempts.get(batch, 0) + 1

    def counts(self) -> dict[str, Any]:
        return {
            "starts": dict(self.starts),
            "attempts": {str(k): v for k, v in self.attempts.items()},
            "ready_at": dict(self.ready_at),
        }

    def handles(self) -> list[Any]:
        return list(self.actors.values())


def _plain(value: Any) -> Any:
    """JSON for numpy scalars and arrays in a handler's result (``json.dumps(default=...)``)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _handler_class(kind: str) -> Any:
    try:
        module, cls = JOBS[kind].split(":")
    except KeyError:
        raise ValueError(f"unknown job kind {kind!r}; known: {', '.join(JOBS)}") from None
    return getattr(importlib.import_module(module), cls)


class ScaleWorker:
    """The actor class of ``map_batches``: loads the model once, then scores whole batches with the job's handler.

    Args:
        spec_json: the :class:`ModelSpec` as JSON; ``device``: what this actor loads it on (``cuda`` = its GPU).
        kind: a key of :data:`JOBS`; ``config_json``: the job's settings (JSON), given to the handler.
        monitor: the run's :class:`RunMonitor` handle.
    """

    def __init__(self, spec_json: str, device: str, kind: str, config_json: str, monitor: Any) -> None:
        self.monitor = monitor
        context = ray.get_runtime_context()
        ray.get(monitor.started.remote(context.get_actor_id(), context.current_actor))
        handle = ModelSpec.from_json(spec_json).load(device=device)
        self.handler = _handler_class(kind)(handle, json.loads(config_json))
        ray.get(monitor.ready.remote(context.get_actor_id(), time.time()))

    def __call__(self, batch: dict[str, Any]) -> dict[str, list[Any]]:
        indices = [int(i) for i in batch["index"]]
        batch_ids = [int(b) for b in batch["batch"]]
        payloads = [json.loads(p) for p in batch["payload"]]
        out_index: list[int] = []
        out_result: list[str] = []
        for b in dict.fromkeys(batch_ids):  # whole batches, in the order they came
            members = [k for k, bid in enumerate(batch_ids) if bid == b]
            ray.get(self.monitor.attempt.remote(b))
            results = self.handler([payloads[k] for k in members])
            if len(results) != len(members):
                raise RuntimeError(f"the handler returned {len(results)} results for {len(members)} items")
            out_index += [indices[k] for k in members]
            out_result += [json.dumps(r, default=_plain) for r in results]
        return {"index": out_index, "result": out_result}


def placement(spec: ModelSpec, workers: int | None, n_batches: int) -> tuple[int, str]:
    """``(workers, device)`` for a run: one GPU per actor when the spec or the cluster asks for GPUs, else one
    CPU per actor; never more actors than batches.

    Default ``workers``: :func:`core.scale.cluster.default_workers` (one per GPU, else one per CPU, at most 8).

    Raises:
        ClusterError: ``--device cuda`` on a cluster without GPUs, or more workers than GPUs / CPUs.
    """
    res = resources()
    gpus, cpus = int(res.get("GPU", 0)), int(res.get("CPU", 0))
    use_gpu = spec.wants_gpu if spec.wants_gpu is not None else gpus > 0
    if use_gpu and gpus == 0:
        raise ClusterError(f"--device {spec.device} but the Ray cluster has no GPUs; use --device cpu")
    capacity = gpus if use_gpu else cpus
    if workers is None:
        workers = default_workers(gpus if use_gpu else 0, cpus)
    if workers < 1:
        raise ValueError(f"--workers must be at least 1, got {workers}")
    if workers > capacity:
        what = "GPUs" if use_gpu else "CPUs"
        raise ClusterError(f"--workers {workers} but the Ray cluster has {capacity} {what} (one per worker)")
    return max(1, min(workers, n_batches)), "cuda" if use_gpu else "cpu"


def _blocks(batches: Sequence[Sequence[Any]]) -> list[Any]:
    """One Arrow table per batch (``index``, ``batch``, JSON ``payload``): map_batches(batch_size=None) then gets
    whole batches."""
    import pyarrow as pa

    blocks, start = [], 0
    for b, batch in enumerate(batches):
        n = len(batch)
        blocks.append(
            pa.table(
                {
                    "index": pa.array(range(start, start + n), type=pa.int64()),
                    "batch": pa.array([b] * n, type=pa.int64()),
                    "payload": pa.array([json.dumps(p) for p in batch], type=pa.string()),
                }
            )
        )
        start += n
    return blocks


def _collect(scored: Any, total: int, progress: Progress | None) -> list[Any]:
    """The workers' results in item order; every item must come back exactly once."""
    results: list[Any] = [None] * total
    seen = [False] * total
    done = 0
    for out in scored.iter_batches(batch_size=None, batch_format="numpy"):
        for i, text in zip(out["index"], out["result"]):
            i = int(i)
            if not 0 <= i < total or seen[i]:
                raise RuntimeError(f"item {i} came back twice (or is unknown); the run's results are not trusted")
            seen[i] = True
            results[i] = json.loads(str(text))
        done += len(out["index"])
        if progress is not None:
            progress(done, total)
    missing = [i for i, ok in enumerate(seen) if not ok]
    if missing:
        raise RuntimeError(f"{len(missing)} item(s) never came back from the workers (first: {missing[:5]})")
    return results


def run_items(
    kind: str,
    spec: ModelSpec,
    config: dict[str, Any],
    batches: Sequence[Sequence[Any]],
    *,
    workers: int | None = None,
    progress: Progress | None = None,
    monitor: Any = None,
) -> tuple[list[Any], RunStats]:
    """Run ``batches`` of JSON-ready payloads on a pool of :class:`ScaleWorker` actors.

    Args:
        kind: a key of :data:`JOBS`; ``config``: the job's settings (JSON-ready).
        batches: the payloads, grouped as they must be computed (one padded batch each).
        workers: actors in the pool (see :func:`placement`).
        progress: ``progress(done, total)`` over items.
        monitor: a :class:`RunMonitor` handle to use (a test reaches the actors through it); default: a new one.

    Returns:
        The results in the order of the flattened ``batches``, and the run's :class:`RunStats`.

    Raises:
        ClusterError: see :func:`placement`; RuntimeError: an item came back twice or not at all (never
        expected: Ray returns each block of a finished task once); the handler's own errors (e.g. ValueError).
    """
    from ray.data import ActorPoolStrategy

    flat = [(b, p) for b, batch in enumerate(batches) for p in batch]
    total = len(flat)
    if total == 0:
        return [], RunStats(workers=0, device="cpu", items=0, batches=0)
    n_workers, device = placement(spec, workers, len(batches))
    monitor = monitor or RunMonitor.remote()
    dataset = ray.data.from_blocks(_blocks(batches))
    # Ray Data creates the actors with max_restarts=-1 and max_task_retries=-1 (restart a dead actor, re-run
    # its batches) unless told otherwise; those defaults are what the retries above rely on.
    remote_args: dict[str, Any] = {"num_gpus": 1} if device == "cuda" else {"num_cpus": 1}
    scored = dataset.map_batches(
        ScaleWorker,
        batch_size=None,
        batch_format="numpy",
        compute=ActorPoolStrategy(size=n_workers),
        fn_constructor_kwargs={
            "spec_json": spec.to_json(),
            "device": device,
            "kind": kind,
            "config_json": json.dumps(config),
            "monitor": monitor,
        },
        **remote_args,
    )
    t0, wall0 = time.perf_counter(), time.time()
    results = _collect(scored, total, progress)
    seconds = time.perf_counter() - t0
    counts = ray.get(monitor.counts.remote())
    startup = min(seconds, max(0.0, max(counts["ready_at"].values(), default=wall0) - wall0))
    stats = RunStats(
        workers=n_workers,
        device=device,
        items=total,
        batches=len(batches),
        actor_restarts=sum(max(0, n - 1) for n in counts["starts"].values()),
        batch_retries=sum(max(0, n - 1) for n in counts["attempts"].values()),
        seconds=seconds,
        startup_s=startup,
        items_per_minute=total / seconds * 60 if seconds > 0 else 0.0,
        scoring_per_minute=total / (seconds - startup) * 60 if seconds > startup else 0.0,
    )
    return results, stats


def new_monitor() -> Any:
    """A fresh :class:`RunMonitor` actor (pass it to :func:`run_items` to reach the run's actors)."""
    return RunMonitor.remote()
