"""SMA's perturbed generations on Ray actors (``python -m core detect --detectors sma … --ray``).

SMA (:func:`core.methods.sma.run_sma`) spends nearly all its time in greedy generations: the two reference
answers and one answer per distinct perturbed prompt (N masks, with retrieval on and off), in batches of
``batch_size``. captum asks for them one batch at a time, but which prompts it asks for never depends on the
answers (Lime's masks are drawn up front, Shapley's permutations come from their own seeded generator,
ablation is fixed). So the run is done in three passes, all through ``run_sma``'s ``answer_fn`` seam:

1. **plan** — ``run_sma`` with an ``answer_fn`` that only records each batch of prompt ids (exactly the batches
   the local run would generate, deduplicated and chunked by the same code) and answers with blanks;
2. **generate** — those batches on Ray actors (:mod:`core.scale.pool`; each actor loads the model once and runs
   :func:`core.methods.sma.greedy_answers` on whole batches, padded as locally);
3. **replay** — ``run_sma`` again with an ``answer_fn`` that returns the actors' answers batch by batch; the
   response scores, ridge fits, ADS and labels are computed on the driver by the same code as a local run.

Same batches on the same kind of device give the same answers, so the result equals the local one. A batch the
plan did not foresee (never expected) is generated on the driver and counted in ``local_batches``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from core.engine import DualPathSettings
from core.methods.sma import SMAResult, SMASettings, greedy_answers, run_sma
from core.model.handle import ModelHandle
from core.model.progress import Progress
from core.scale.pool import RunStats, run_items
from core.scale.spec import ModelSpec

Batch = tuple[tuple[int, ...], ...]


def _key(prompts: Sequence[Sequence[int]], settings: DualPathSettings) -> tuple[Batch, str]:
    return tuple(tuple(int(i) for i in p) for p in prompts), settings.template + f":{settings.max_new_tokens}"


class GenerateHandler:
    """The actors' side: ``{"prompts", "settings"}`` (one batch of prompt ids) → ``[[answer, Len], …]``."""

    def __init__(self, handle: ModelHandle, config: dict[str, Any]) -> None:
        self.handle = handle

    def __call__(self, payloads: list[dict[str, Any]]) -> list[list[list[Any]]]:
        out = []
        for p in payloads:
            answers = greedy_answers(self.handle, p["prompts"], DualPathSettings.from_dict(p["settings"]))
            out.append([[text, int(n)] for text, n in answers])
        return out


class _Recorder:
    """Pass 1's ``answer_fn``: records each requested batch (in order, once) and answers with blanks."""

    def __init__(self) -> None:
        self.batches: dict[tuple[Batch, str], dict[str, Any]] = {}

    def __call__(self, prompts: list[list[int]], settings: DualPathSettings) -> list[tuple[str, int]]:
        key = _key(prompts, settings)
        self.batches.setdefault(key, {"prompts": [list(p) for p in key[0]], "settings": settings.to_dict()})
        return [("", 0)] * len(prompts)


class _Replay:
    """Pass 3's ``answer_fn``: the actors' answers for each batch; a batch not planned is generated locally."""

    def __init__(self, handle: ModelHandle, answers: dict[tuple[Batch, str], list[tuple[str, int]]]) -> None:
        self.handle = handle
        self.answers = answers
        self.local_batches = 0

    def __call__(self, prompts: list[list[int]], settings: DualPathSettings) -> list[tuple[str, int]]:
        found = self.answers.get(_key(prompts, settings))
        if found is None:
            self.local_batches += 1
            return greedy_answers(self.handle, prompts, settings)
        return list(found)


def run_sma_on_ray(
    handle: ModelHandle,
    spec: ModelSpec,
    query: str,
    context: str,
    settings: SMASettings | None = None,
    *,
    workers: int | None = None,
    progress: Progress | None = None,
    on_progress: Progress | None = None,
) -> tuple[SMAResult, RunStats, int]:
    """:func:`core.methods.sma.run_sma` with its generations on the connected Ray cluster.

    Args:
        handle: the driver's model handle (its tokenizer builds the prompts; it generates nothing unless a
            batch was not planned).
        spec: the model each worker loads (the same model as ``handle``).
        workers: actors (:func:`core.scale.pool.placement`); ``progress(done, total)`` in batches.
        on_progress: ``run_sma``'s own callback, called during the replay.

    Returns:
        ``(result, stats, local_batches)``: the :class:`SMAResult` (equal to the local run's), the Ray run's
        stats, and how many batches had to be generated on the driver (0 when the plan held).

    Raises:
        ValueError: as ``run_sma`` (empty inputs, bad settings, prompts over the token budget).
    """
    recorder = _Recorder()
    run_sma(handle, query, context, settings, answer_fn=recorder)
    planned = list(recorder.batches.values())
    results, stats = run_items(
        "sma", spec, {}, [[p] for p in planned], workers=workers, progress=progress
    )  # one item (a whole padded batch of prompts) per Ray batch
    answers = {
        _key(p["prompts"], DualPathSettings.from_dict(p["settings"])): [(str(a), int(n)) for a, n in res]
        for p, res in zip(planned, results)
    }
    replay = _Replay(handle, answers)
    result = run_sma(handle, query, context, settings, on_progress=on_progress, answer_fn=replay)
    result.timings["ray_s"] = stats.seconds
    return result, stats, replay.local_batches


class RaySMARunner:
    """A stand-in for :func:`run_sma` (same call signature) that runs the generations on Ray; the ``sma`` detector
    uses it when it is put under :data:`core.detectors.keys.SMA_RUNNER`.

    Attributes:
        stats: the last run's :class:`RunStats` (``None`` before the first); ``local_batches``: its batches
            generated on the driver.
    """

    def __init__(self, spec: ModelSpec, *, workers: int | None = None, progress: Progress | None = None) -> None:
        self.spec = spec
        self.workers = workers
        self.progress = progress
        self.stats: RunStats | None = None
        self.local_batches = 0

    def __call__(
        self,
        handle: ModelHandle,
        query: str,
        context: str,
        settings: SMASettings | None = None,
        *,
        on_progress: Progress | None = None,
    ) -> SMAResult:
        result, self.stats, self.local_batches = run_sma_on_ray(
            handle,
            self.spec,
            query,
            context,
            settings,
            workers=self.workers,
            progress=self.progress,
            on_progress=on_progress,
        )
        return result
