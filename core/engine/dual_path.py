"""The dual-path protocol for one (query, context) row (docs/architecture.md, "The dual-path protocol").

1. The retrieval path (query + context) answers greedily with ``generate(output_logits=True)``; its
   next-token distributions are the generation's own raw logits, not a second pass.
2. The parametric path (query alone) is teacher-forced on the retrieval answer in **one** forward pass over
   parametric prompt + answer, so position t of both paths predicts the same token ``answer[t]``.
3. KL_t = KL(P_retrieval,t ‖ P_parametric,t) over the full vocabulary in float32 log-space;
   Z = Σ_{t<T} KL_t (RePCS eq. 2).

For the live view the parametric path's own free answer is generated in the same batched ``generate``
call as the retrieval answer (two left-padded rows), so both stream at once; scoring never needs it.

One row is a batch of one: :func:`run_dual_path` prepares the prompts and hands them to the engine's one core,
:func:`core.engine.batch.score_prepared` (the same generate, forward, sliced scoring and result as many rows),
with a token streamer for the live view. The layers: :mod:`~core.engine.settings` (what the user chose),
:mod:`~core.engine.prepare` (the prompts), :mod:`~core.engine.generation` (the model calls),
:mod:`~core.engine.scoring` (logits → result), :mod:`~core.engine.batch` (the core and many rows).
"""

from __future__ import annotations

from core.engine.batch import ScoreRequest, score_prepared
from core.engine.estimate import observe_result
from core.engine.generation import SCORING, EventCallback, StreamEvent
from core.engine.prepare import prepare_prompts
from core.engine.result import DualPathResult
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
    record: bool = False,
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
        record: keep what the run's own passes read for the detectors in ``result.internals``
            (:class:`~core.engine.result.RunInternals`), so that the agreement view needs no second pass over the
            retrieval path nor over the parametric prompt; every score is the same either way.

    Returns:
        A :class:`DualPathResult` (CPU numpy arrays and strings only).

    Raises:
        ValueError: invalid settings or inputs (nothing has run then).
    """
    settings = settings or DualPathSettings()
    prepared = prepare_prompts(handle, query, context, settings)
    request = ScoreRequest(settings, threshold, threshold_source, free_parametric, record=record).resolved(handle)
    (result,) = score_prepared(handle, [prepared], request, on_event=on_event)
    result.timings.pop("batch_size", None)  # one row: its own times, as the JSON has always said
    observe_result(handle, result)  # the measured cost behind "≈ N s on this machine" estimates
    if on_event is not None:
        on_event(StreamEvent(SCORING, "", 1, 1, True))
    return result
