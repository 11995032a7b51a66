"""The dual-path engine: one (query, context) row → a :class:`DualPathResult`.

The protocol is described in docs/architecture.md, "The dual-path protocol".

Modules, one layer each:

* :mod:`~core.engine.settings` — :class:`DualPathSettings`, what the user chose;
* :mod:`~core.engine.prepare` — :func:`prepare_prompts`: validated inputs and both paths' prompts;
* :mod:`~core.engine.generation` — the model calls: :func:`generate_greedy` (streamed with
  :class:`StreamEvent`), :func:`teacher_forced_logits`, :func:`teacher_forced_logits_batch`;
* :mod:`~core.engine.scoring` — :func:`score_paths` (KL, entropies, top-k) and :func:`build_result`;
* :mod:`~core.engine.dual_path` — :func:`run_dual_path`, the protocol for one row;
* :mod:`~core.engine.batch` — the one core :func:`score_prepared` (B rows: one generate, one forward) and
  :func:`score_batch` / :func:`score_rows` with a :class:`ScoreRequest`; one row is a batch of one;
* :mod:`~core.engine.result` — :class:`DualPathResult` and its JSON form.

Import the public names from here: ``from core.engine import DualPathSettings, run_dual_path``.
"""

from core.engine.batch import (
    DEFAULT_BATCH_SIZE,
    MAX_BATCH_TOKENS,
    ScoreRequest,
    plan_batches,
    score_batch,
    score_prepared,
    score_rows,
)
from core.engine.dual_path import run_dual_path
from core.engine.generation import (
    SCORING,
    EventCallback,
    StreamEvent,
    generate_greedy,
    left_pad,
    teacher_forced_logits,
    teacher_forced_logits_batch,
)
from core.engine.prepare import PreparedPrompts, Prompt, prepare_prompts
from core.engine.result import PARAMETRIC, PATHS, RETRIEVAL, SCHEMA_VERSION, DualPathResult, PathOutput
from core.engine.scoring import (
    NOT_GENERATED,
    Answer,
    PathScores,
    PathStats,
    build_result,
    calibration_mismatch,
    resolve_threshold,
    score_paths,
)
from core.engine.settings import DualPathSettings

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "MAX_BATCH_TOKENS",
    "NOT_GENERATED",
    "PARAMETRIC",
    "PATHS",
    "RETRIEVAL",
    "SCHEMA_VERSION",
    "SCORING",
    "Answer",
    "DualPathResult",
    "DualPathSettings",
    "EventCallback",
    "PathOutput",
    "PathScores",
    "PathStats",
    "PreparedPrompts",
    "Prompt",
    "ScoreRequest",
    "StreamEvent",
    "build_result",
    "calibration_mismatch",
    "generate_greedy",
    "left_pad",
    "plan_batches",
    "prepare_prompts",
    "resolve_threshold",
    "run_dual_path",
    "score_batch",
    "score_paths",
    "score_prepared",
    "score_rows",
    "teacher_forced_logits",
    "teacher_forced_logits_batch",
]
