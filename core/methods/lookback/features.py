"""The Lookback Lens' one traced forward per row: the lookback-ratio map of the retrieval path.

For a dual-path result, the retrieval prompt (with the context) is followed by the retrieval answer, teacher
forced: one forward over prompt + answer[:-1] through :func:`core.model.trace.trace` with the
:func:`~core.model.trace.lookback_ratio` reducer (``produced=True``), so the query that *produces* answer token t
(position ``prompt_len − 1 + t``) is read — the attention the model had when it generated that token. The
"context" is the whole retrieval prompt, as in the paper's code (the tokens before the first generated one);
"new" tokens are the answer tokens generated before t. The ratios are per *query* head, so grouped- and
multi-query attention need nothing special: heads sharing a key/value head still attend differently.

Many rows share one left-padded forward per batch (:func:`lookback_maps`); nothing T × T is kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from core.engine import DualPathResult
from core.methods.internals.replay import prepared_for
from core.model.handle import ModelHandle
from core.model.progress import Progress
from core.model.trace import AttentionReducer, lookback_ratio, trace

BATCH_SIZE = 8


@dataclass
class LookbackMap:
    """One row's lookback ratios.

    Attributes:
        lr: ``(L, H, n)`` float32, LR of head (ℓ, h) while answer token t was produced; column 0 is NaN (no
            earlier answer token: see :mod:`core.methods.lookback.maths`).
        answer_tokens: the ``n`` answer tokens' texts.
        prompt_len: the retrieval prompt's tokens (all counted as context).
    """

    lr: np.ndarray
    answer_tokens: list[str]
    prompt_len: int

    @property
    def n_layers(self) -> int:
        return int(self.lr.shape[0])

    @property
    def n_heads(self) -> int:
        return int(self.lr.shape[1])


@dataclass(frozen=True)
class LookbackPlan:
    """The traced sequence of one row (retrieval prompt + answer[:-1]) and where its answer starts."""

    ids: list[int]
    prompt_len: int
    n_answer: int
    answer_tokens: list[str]

    def reducer(self) -> AttentionReducer:
        """The Lookback Lens' reducer over this sequence (the whole prompt is the context)."""
        context = [True] * self.prompt_len + [False] * (len(self.ids) - self.prompt_len)
        return lookback_ratio(context, self.prompt_len, produced=True)

    def map_from(self, per_layer: Sequence[np.ndarray]) -> LookbackMap:
        """The map from the reducer's per-layer values ``(H, n)`` of a traced forward over (at least) ``ids``."""
        lr = np.stack(per_layer).astype(np.float32)[..., : self.n_answer]  # (L, H, n)
        if lr.shape[-1] != self.n_answer:
            raise ValueError(f"lookback map of {lr.shape[-1]} tokens for an answer of {self.n_answer}")
        return LookbackMap(lr=lr, answer_tokens=list(self.answer_tokens), prompt_len=self.prompt_len)


def plan_map(handle: ModelHandle, result: DualPathResult) -> LookbackPlan:
    """The traced sequence of ``result``'s lookback map (no model call).

    Raises:
        ValueError: a result of another model, or an empty answer.
    """
    if result.model != handle.info.name:
        raise ValueError(f"This result was produced by {result.model!r}, but the loaded model is {handle.info.name!r}.")
    answer = [int(i) for i in result.answer_token_ids]
    if not answer:
        raise ValueError("the retrieval answer is empty: there is no answer token to compute a lookback ratio for")
    prompt = list(prepared_for(handle, result).retrieval.ids)
    return LookbackPlan(prompt + answer[:-1], len(prompt), len(answer), list(result.answer_tokens))


def lookback_maps(
    handle: ModelHandle,
    results: Sequence[DualPathResult],
    *,
    batch_size: int = BATCH_SIZE,
    progress: Progress | None = None,
) -> list[LookbackMap]:
    """The lookback map of each result's retrieval path, ``batch_size`` rows per traced forward.

    Raises:
        ValueError: a result of another model, an empty answer, or a model without attention weights.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    plans = [plan_map(handle, r) for r in results]
    out: list[LookbackMap] = []
    for start in range(0, len(plans), batch_size):
        chunk = plans[start : start + batch_size]
        t = trace(handle, [p.ids for p in chunk], residual=False, attention={"lr": [p.reducer() for p in chunk]})
        out.extend(p.map_from(t.attention["lr"][b]) for b, p in enumerate(chunk))
        if progress is not None:
            progress(len(out), len(plans), "lookback ratios")
    return out


def lookback_map(handle: ModelHandle, result: DualPathResult) -> LookbackMap:
    """One result's lookback map (:func:`lookback_maps` of one row)."""
    return lookback_maps(handle, [result])[0]
