"""One lean scoring run of the dual path, the unit every sweep repeats.

A scoring run is one greedy generation of the retrieval answer with its logits plus one teacher-forced
parametric pass — the engine's own core (:func:`core.engine.batch.score_prepared`, as
:func:`core.engine.run_dual_path` with ``free_parametric=False``) — run under whatever interventions are
active. Sweeps use short answers (:data:`SWEEP_MAX_NEW_TOKENS`, T = the same), so Z values inside one sweep are
comparable with each other and with the sweep's own clean reference, not with a Z computed with another T.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from core.engine import DualPathSettings, PreparedPrompts
from core.engine.batch import ScoreRequest, score_prepared
from core.maths.divergence import log_probs
from core.model.handle import ModelHandle
from core.model.trace import trace

SWEEP_MAX_NEW_TOKENS = 16
"""Answer tokens per scoring run in sweeps (and their T): affordable on a CPU."""


def sweep_settings(settings: DualPathSettings, max_new_tokens: int = SWEEP_MAX_NEW_TOKENS) -> DualPathSettings:
    """The settings of a sweep's scoring runs: ``max_new_tokens`` answer tokens, T = ``max_new_tokens``.

    Raises:
        ValueError: invalid resulting settings (e.g. ``max_new_tokens < 1``).
    """
    out = replace(settings, max_new_tokens=int(max_new_tokens), score_window=int(max_new_tokens), force_length=False)
    out.validate()
    return out


@dataclass(frozen=True)
class ScoredRun:
    """The outcome of one scoring run (under whatever interventions were active).

    Attributes:
        z: Z = Σ_{t<T} KL(P_retrieval,t ‖ P_parametric,t) on this run's own retrieval answer, nats.
        token_kl: KL_t, shape ``(n,)``, nats.
        answer_ids: the retrieval answer generated in this run.
        answer: its text.
        first_token_logprob: log P_retrieval(clean first answer token | retrieval prompt), nats.
        first_token_logprob_para: log P_parametric(clean first answer token | parametric prompt), nats.
        finish: ``"eos"`` or ``"length"``.
    """

    z: float
    token_kl: np.ndarray
    answer_ids: list[int]
    answer: str
    first_token_logprob: float
    first_token_logprob_para: float
    finish: str


def score_run(
    handle: ModelHandle, prepared: PreparedPrompts, settings: DualPathSettings, clean_first_token: int | None = None
) -> ScoredRun:
    """Generate the retrieval answer greedily and score it against the teacher-forced parametric path.

    Through the engine (:func:`core.engine.batch.score_prepared`, a batch of one without a τ): the same
    generate → teacher-forced pass → KL → Z as :func:`core.engine.run_dual_path` with ``free_parametric=False``,
    plus the log-probability both paths give the clean answer's first token (``clean_first_token``; default: this
    run's own first token), from the same logits. Both passes run in one session of ``handle``, under whatever
    interventions are active.
    """
    request = ScoreRequest(settings=settings, first_token_logprob=True, first_token=clean_first_token)
    (result,) = score_prepared(handle, [prepared], request)
    first = result.extras["first_token_logprob"]
    return ScoredRun(
        z=result.repcs_score,
        token_kl=result.token_kl,
        answer_ids=list(result.retrieval.token_ids),
        answer=result.retrieval.answer,
        first_token_logprob=first["retrieval"],
        first_token_logprob_para=first["parametric"],
        finish=result.retrieval.finish,
    )


def first_token_logprob(handle: ModelHandle, prompt_ids: Sequence[int], token: int) -> float:
    """log P(token | prompt) from one forward pass (under whatever interventions are active), nats."""
    logits = trace(handle, [prompt_ids], residual=False, logits=1).logits[0, -1]
    return float(log_probs(logits)[int(token)].item())
