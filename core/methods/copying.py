"""The heads that copied the answer: attention from the step that produces the answer span to the span in the context.

A diagnostic (issue 42 D; not read by the headline): where the answer's span also occurs in the context, a head that
*copies* it attends, at the step that generates the span's first token, to the tokens of that occurrence
("retrieval heads" that copy verbatim, Kahardipraja et al. 2025, "The Atlas of In-Context Learning"). For every
decoder layer ℓ and head h:

* ``copy[ℓ, h] = Σ_{j ∈ occurrence} A_{ℓ,h}(q, j)`` — the attention weight of query ``q`` on the context tokens where
  the span occurs (every whole-word occurrence, summed over its tokens);
* ``context[ℓ, h] = Σ_{j ∈ context} A_{ℓ,h}(q, j)`` — the same on the whole context, for reference;

with ``q = prompt_len − 1 + t₀`` the retrieval path's position that generates the span's first answer token ``t₀``
(the token before it: the last prompt token for ``t₀ = 0``). The context's tokens and the occurrence's are found by
the tokenizer's character offsets in the retrieval prompt (:func:`core.methods.internals.segments.prompt_segments`'
rule: a token is in a range when its characters overlap it). What is looked for is the span as the context writes it
(:func:`core.engine.swap_words.target_phrase`: the whole span, else its head word, else its near form, "Rome" for the
answer's "Roma") — the swap test's own target.

The attention comes from the run's recording of its generation when it holds one
(``run_dual_path(…, record=True)``, :mod:`core.model.recording`: no model call), else from one traced forward over the
retrieval prompt + the answer up to the span (:func:`core.model.trace.trace`: the model's lock held, eager attention,
hooks removed in ``finally``; only the one query row is reduced, per layer, to two sums).

What it cannot conclude: attention is not attribution. A head that attends to the span's occurrence is a copying
candidate, not proof that its output wrote the span (its value vectors may be ignored downstream); a span the model
also knows can be attended to and recalled at once.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.engine.prepare import PreparedPrompts
from core.engine.result import DualPathResult
from core.engine.span import AnswerSpan
from core.engine.swap import headline_span
from core.engine.swap_words import target_phrase
from core.methods.internals.replay import prepared_for
from core.model.handle import ModelHandle
from core.model.prompts import TEMPLATES
from core.model.trace import Trace, segment_mass, trace

logger = logging.getLogger(__name__)

TOP_HEADS = 5
"""How many heads :func:`copying_heads` names, by copy weight."""
OTHER, CONTEXT_REST, OCCURRENCE = range(3)
"""The three key segments of the reduction: outside the context, the context off the span, the span's occurrence."""


@dataclass
class CopyingHeads:
    """The copying signal of one run (see the module docstring). ``L`` decoder layers, ``H`` heads.

    Attributes:
        span: the answer span as the answer writes it (``None``: the answer has no span).
        phrase: what was looked for in the context (the span as the context writes it), ``None`` where absent.
        position: the span's first answer position ``t₀``; ``row``: the query row ``prompt_len − 1 + t₀``.
        occurrences: how many whole-word occurrences of ``phrase`` the context holds.
        occurrence_tokens: the retrieval prompt's token positions of those occurrences.
        context_tokens: how many of the prompt's tokens are the context's.
        copy: ``(L, H)`` float64 attention weight of ``row`` on the occurrence tokens, or ``None`` (nothing to copy).
        context: ``(L, H)`` float64 attention weight of ``row`` on every context token, or ``None``.
        top: the :data:`TOP_HEADS` heads of largest copy weight, ``(layer, head, weight)``, largest first.
        note: one sentence: what was measured, or why nothing was.
        source: ``"recording"`` (read from the run's own generation), ``"forward"`` (one traced forward) or ``""``.
    """

    span: str | None
    phrase: str | None
    position: int | None
    row: int | None
    occurrences: int = 0
    occurrence_tokens: tuple[int, ...] = ()
    context_tokens: int = 0
    copy: np.ndarray | None = None
    context: np.ndarray | None = None
    top: tuple[tuple[int, int, float], ...] = ()
    note: str = ""
    source: str = ""

    @property
    def available(self) -> bool:
        """Whether the per-head weights were measured (the span occurs in the context)."""
        return self.copy is not None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: every field, the maps as nested lists rounded to 6 decimals."""
        return {
            "span": self.span,
            "phrase": self.phrase,
            "position": self.position,
            "row": self.row,
            "occurrences": self.occurrences,
            "occurrence_tokens": list(self.occurrence_tokens),
            "context_tokens": self.context_tokens,
            "copy": None if self.copy is None else np.round(self.copy, 6).tolist(),
            "context": None if self.context is None else np.round(self.context, 6).tolist(),
            "top": [{"layer": a, "head": b, "weight": round(w, 6)} for a, b, w in self.top],
            "note": self.note,
            "source": self.source,
        }


def _whole_words(phrase: str) -> re.Pattern[str]:
    """Whole-word, case-insensitive occurrences of ``phrase`` (its words joined by any non-word run): the rule of
    :func:`core.engine.swap_words.occurrences`, here with the character offsets the tokens are matched by."""
    words = re.findall(r"[^\W_]+", phrase)
    body = r"[\W_]+".join(re.escape(w) for w in words)
    return re.compile(rf"(?<![^\W_]){body}(?![^\W_])", re.IGNORECASE)


def token_ranges(handle: ModelHandle, prepared: PreparedPrompts, phrase: str) -> tuple[list[int], list[int], int]:
    """``(context tokens, occurrence tokens, occurrences)`` of the retrieval prompt: the token positions whose
    characters overlap the context, those overlapping a whole-word occurrence of ``phrase`` in it, and how many
    occurrences there are.

    Raises:
        ValueError: the context is not found in the prompt, or the tokenizer gives no usable offset mapping.
    """
    prompt = prepared.retrieval
    c0 = prompt.prompt.find(prepared.context)
    if c0 < 0 or not prepared.context:
        raise ValueError("the context is not found in the retrieval prompt: no context tokens to attend to")
    matches = [(c0 + m.start(), c0 + m.end()) for m in _whole_words(phrase).finditer(prepared.context)]
    chat = TEMPLATES[prepared.template_key].chat
    try:
        enc = handle.tokenizer(prompt.prompt, add_special_tokens=not chat, return_offsets_mapping=True)
        offsets = [tuple(o) for o in enc["offset_mapping"]]
        same = list(enc["input_ids"]) == list(prompt.ids)
    except (NotImplementedError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"no character offsets from this tokenizer ({exc}): the span's tokens are not found") from exc
    if not same:
        raise ValueError("the tokenizer's offsets do not tokenize the prompt as the run did")
    c1 = c0 + len(prepared.context)

    def overlaps(s: int, e: int, a: int, b: int) -> bool:
        return e > s and s < b and e > a

    context = [i for i, (s, e) in enumerate(offsets) if overlaps(s, e, c0, c1)]
    occurrence = [i for i, (s, e) in enumerate(offsets) if any(overlaps(s, e, a, b) for a, b in matches)]
    return context, occurrence, len(matches)


def _nothing(span: AnswerSpan | None, note: str, **fields: Any) -> CopyingHeads:
    first = span.positions[0] if span is not None and span.positions else None
    return CopyingHeads(span=None if span is None else span.text, phrase=None, position=first, row=None, note=note,
                        **fields)  # fmt: skip


def _attention(handle: ModelHandle, result: DualPathResult, ids: list[int], reducer) -> tuple[Trace, str]:
    """The reduced attention over ``ids``: from the run's recording when it has a usable one, else one forward."""
    recorded = result.internals.retrieval if result.internals is not None else None
    if recorded is not None and recorded.failed is None:
        try:
            return recorded.trace(ids, residual=False, attention={"mass": reducer}), "recording"
        except ValueError as exc:
            logger.info("the run's recording cannot serve the copying heads (one traced forward instead): %s", exc)
    return trace(handle, [ids], residual=False, attention={"mass": reducer}), "forward"


def top_heads(copy: np.ndarray, k: int = TOP_HEADS) -> tuple[tuple[int, int, float], ...]:
    """The ``k`` cells of largest value of a ``(layers, heads)`` map, ``(layer, head, value)``, largest first (ties:
    the lower layer, then the lower head)."""
    flat = np.asarray(copy, dtype=np.float64).ravel()
    order = np.lexsort((np.arange(flat.size), -flat))[: max(0, int(k))]
    n_heads = copy.shape[1]
    return tuple((int(i // n_heads), int(i % n_heads), float(flat[i])) for i in order)


def copying_heads(
    handle: ModelHandle, result: DualPathResult, span: AnswerSpan | None = None, *, top: int = TOP_HEADS
) -> CopyingHeads:
    """The attention of every head from the step that generates the span's first token to the span's occurrence
    in the context, and to the whole context (see the module docstring).

    Args:
        handle: the model that produced ``result`` (eager attention).
        result: a dual-path run.
        span: the answer span; default the one the headline located (:func:`core.engine.swap.headline_span`).
        top: how many heads to name.

    Returns:
        :class:`CopyingHeads`; without a span, or with a span the context does not hold, no model call and a note
        that says there is nothing to copy.

    Raises:
        ValueError: a result of another model or tokenizer, a span outside the answer, or a model without attention
            weights.
    """
    if result.model != handle.info.name:
        raise ValueError(f"This result was produced by {result.model!r}, but the loaded model is {handle.info.name!r}.")
    span = headline_span(result) if span is None else span
    if span is None or not span.positions:
        return _nothing(span, "The answer has no span (no content word): there is nothing to copy.")
    t0 = int(span.positions[0])
    answer = [int(i) for i in result.answer_token_ids]
    if not 0 <= t0 < len(answer):
        raise ValueError(f"the span's first position {t0} is outside the answer's {len(answer)} tokens")
    if not result.context.strip():
        return _nothing(span, f"The run has no context: there is nothing to copy “{span.text}” from.")
    prepared = prepared_for(handle, result)
    phrase = target_phrase(span, prepared.context)
    if phrase is None:
        return _nothing(span, f"“{span.text}” does not occur in the context: there is nothing to copy, so no head "
                        "can have copied it (the answer did not take it verbatim from the context).")  # fmt: skip
    context, occurrence, n = token_ranges(handle, prepared, phrase)
    plen = len(prepared.retrieval.ids)
    ids, row = list(prepared.retrieval.ids) + answer[:t0], plen - 1 + t0
    segments = np.full(len(ids), OTHER, dtype=np.int64)
    segments[context] = CONTEXT_REST
    segments[occurrence] = OCCURRENCE
    traced, source = _attention(handle, result, ids, segment_mass([row], segments, 3))
    mass = np.stack([np.asarray(m, dtype=np.float64)[:, 0, :] for m in traced.attention["mass"][0]])  # (L, H, 3)
    copy = mass[:, :, OCCURRENCE]
    heads = top_heads(copy, top)
    said = "the last prompt token" if t0 == 0 else f"answer position {t0 - 1}"
    note = (
        f"Attention from {said} (the step that generates “{span.text}”) to the context's {n} occurrence"
        f"{'s' if n != 1 else ''} of “{phrase}” ({len(occurrence)} of its {len(context)} tokens); the strongest head, "
        f"layer {heads[0][0]} head {heads[0][1]}, puts {heads[0][2]:.1%} of its attention there."
    )
    return CopyingHeads(
        span=span.text,
        phrase=phrase,
        position=t0,
        row=row,
        occurrences=n,
        occurrence_tokens=tuple(occurrence),
        context_tokens=len(context),
        copy=copy,
        context=mass[:, :, CONTEXT_REST] + copy,
        top=heads,
        note=note,
        source=source,
    )
