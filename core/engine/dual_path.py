"""The dual-path protocol for one (query, context) row (DESIGN.md §4).

1. The retrieval path (query + context) answers greedily with ``generate(output_logits=True)``; its
   next-token distributions are the generation's own raw logits, not a second pass.
2. The parametric path (query alone) is teacher-forced on the retrieval answer in **one** forward pass over
   parametric prompt + answer, so position t of both paths predicts the same token ``answer[t]``.
3. KL_t = KL(P_retrieval,t ‖ P_parametric,t) over the full vocabulary in float32 log-space;
   Z = Σ_{t<T} KL_t (RePCS eq. 2).

For the live view the parametric path's own free answer is generated in the same batched ``generate``
call as the retrieval answer (two left-padded rows), so both stream at once; scoring never needs it.

The layers: :mod:`~core.engine.settings` (what the user chose), :mod:`~core.engine.prepare` (the prompts),
:mod:`~core.engine.generation` (the model calls), :mod:`~core.engine.scoring` (logits → result);
:mod:`~core.engine.batch` runs many rows through the same steps.
"""

from __future__ import annotations

import time

from core.engine.estimate import observe_result
from core.engine.generation import SCORING, EventCallback, StreamEvent, generate_greedy, teacher_forced_logits
from core.engine.prepare import prepare_prompts
from core.engine.result import PARAMETRIC, RETRIEVAL, DualPathResult
from core.engine.scoring import NOT_GENERATED, Answer, build_result, resolve_threshold, score_paths
from core.engine.settings import DualPathSettings
from core.engine.threshold import Threshold
from core.model.handle import ModelHandle


def run_dual_path(
    handle: ModelHandle,
    query: str,
    context: str,
    settings: DualPathSettings | None = None,
    *,
    threshold: Threshold | None = None,
    threshold_source: str | None = None,
    on_event: EventCallback | None = None,
    free_parametric: bool = True,
) -> DualPathResult:
    """Run both paths and score them.

    Args:
        handle: the shared model.
        query, context: user text (validated; see :func:`core.engine.prepare.prepare_prompts`).
        settings: :class:`DualPathSettings` (defaults if ``None``).
        threshold: τ to apply; default: :func:`core.engine.threshold.threshold_for` the model.
        on_event: called with a :class:`StreamEvent` after every generated token of either path, then twice
            for the scoring step (``path == "scoring"``: once when it starts, once with ``done=True``).
        free_parametric: also generate the parametric path's own answer (batched with the retrieval
            answer). ``False`` gives the cheapest exact score: one generate + one forward pass.

    Returns:
        A :class:`DualPathResult` (CPU numpy arrays and strings only).

    Raises:
        ValueError: invalid settings or inputs (nothing has run then).
    """
    settings = settings or DualPathSettings()
    prepared = prepare_prompts(handle, query, context, settings)
    t0 = time.perf_counter()
    with handle.session():  # both passes in one hold of the model: no other run interleaves
        if free_parametric:
            (retrieval_ids, retrieval_logits, retrieval_finish), (parametric_ids, _, parametric_finish) = (
                generate_greedy(
                    handle,
                    [prepared.retrieval.ids, prepared.parametric.ids],
                    settings,
                    paths=[RETRIEVAL, PARAMETRIC],
                    on_event=on_event,
                )
            )
        else:
            ((retrieval_ids, retrieval_logits, retrieval_finish),) = generate_greedy(
                handle, [prepared.retrieval.ids], settings, paths=[RETRIEVAL], on_event=on_event
            )
            parametric_ids, parametric_finish = NOT_GENERATED
        t1 = time.perf_counter()
        if on_event is not None:
            on_event(StreamEvent(SCORING, "", 0, 1, False))
        parametric_logits = teacher_forced_logits(handle, prepared.parametric.ids, retrieval_ids)
    scores = score_paths(retrieval_logits, parametric_logits, retrieval_ids, settings.top_k)
    t2 = time.perf_counter()
    del retrieval_logits, parametric_logits
    threshold, threshold_source = resolve_threshold(handle, threshold, threshold_source)
    result = build_result(
        handle,
        prepared,
        settings,
        scores,
        retrieval=Answer(retrieval_ids, retrieval_finish),
        parametric=Answer(list(parametric_ids), parametric_finish),
        threshold=threshold,
        threshold_source=threshold_source,
        timings={"generate_s": t1 - t0, "score_s": t2 - t1, "total_s": t2 - t0},
    )
    observe_result(handle, result)  # the measured cost behind "≈ N s on this machine" estimates
    if on_event is not None:
        on_event(StreamEvent(SCORING, "", 1, 1, True))
    return result
