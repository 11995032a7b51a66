"""Where a plain-template answer ends: at the first turn the model begins of its own.

A base model prompted with a plain template (``Context: … Question: … Answer:``) has no end-of-turn token to
say its answer is over, so after the answer it often writes the template on: ``"French\\n\\nQuestion: what language
is … Answer: French …"`` (Gemma 3 270M did on 210 of 290 typed rows). What follows its own ``Question:`` is not
its answer to the user's question, yet it was scored as one: its KL, its span, its swap test. Here an answer ends
at the first line that starts with one of the template's own labels (:attr:`PromptTemplate.turn_labels`,
and the worked-answer fields of :data:`FIELD_LABELS`), once
the answer has said something before it; such an answer stops with ``finish == "turn"``.

* :func:`turn_pattern` — the pattern of a run's template (``None`` for a chat template or a forced length);
* :func:`answer_end` — how many of an answer's tokens come before that line;
* :class:`TurnStop` — the stopping criterion that ends a row's generation once the line is written, so the rest
  of the budget is not spent on it.

Greedy decoding is causal, so the tokens kept, their logits and everything scored on them are exactly those of a
generation that had stopped there.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import torch
from transformers import StoppingCriteria

from core.model.prompts import resolve_template

FIELD_LABELS = ("Explanation", "Solution")
"""Labels a base model writes after its answer though the template has none: a worked answer's fields."""

TURN = "turn"
"""The finish of an answer cut where the model began a turn of its own."""


def turn_pattern(template_key: str, tokenizer: Any, *, force_length: bool = False) -> re.Pattern[str] | None:
    """The line that begins a turn of the model's own under the template ``template_key``; ``None`` when answers
    end otherwise (a chat template's end token) or are never cut (``force_length``)."""
    if force_length:
        return None
    try:
        labels = resolve_template(template_key, tokenizer).turn_labels
    except ValueError:  # a key the run would refuse anyway
        return None
    if not labels:
        return None
    labels = tuple(dict.fromkeys((*labels, *FIELD_LABELS)))
    return re.compile(r"\n\s*(?:" + "|".join(re.escape(label) for label in labels) + r")[ \t]*:")


def _decode(tokenizer: Any, ids: Sequence[int]) -> str:
    return tokenizer.decode(list(ids), skip_special_tokens=True)


def turn_start(pattern: re.Pattern[str] | None, text: str) -> int | None:
    """Where in ``text`` the model's own turn starts, or ``None`` (no such line, or nothing said before it)."""
    if pattern is None:
        return None
    match = pattern.search(text)
    if match is None or not text[: match.start()].strip():
        return None
    return match.start()


def answer_end(tokenizer: Any, pattern: re.Pattern[str] | None, ids: Sequence[int]) -> int | None:
    """The number of ``ids`` that come before the model's own turn, or ``None`` when the answer has none.

    The kept tokens are those whose text ends at or before the line's first newline (a token that holds the
    newline and more is dropped with it)."""
    start = turn_start(pattern, _decode(tokenizer, ids))
    if start is None:
        return None
    keep = 0
    for k in range(1, len(ids) + 1):
        if len(_decode(tokenizer, ids[:k])) > start:
            break
        keep = k
    return keep or None


class TurnStop(StoppingCriteria):
    """Ends a row's generation once its answer has begun a turn of its own (see the module docstring).

    ``width`` is the left-padded prompt's length: the row's answer is ``input_ids[row, width:]``. A row is only
    decoded when its last token holds a ``:``, so the check costs one small decode a step.
    """

    def __init__(self, tokenizer: Any, pattern: re.Pattern[str], width: int) -> None:
        self.tokenizer = tokenizer
        self.pattern = pattern
        self.width = width

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: object) -> torch.Tensor:
        done = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        if input_ids.shape[1] <= self.width:
            return done
        rows = input_ids[:, self.width :].tolist()
        for row, ids in enumerate(rows):
            if (
                ":" in _decode(self.tokenizer, ids[-1:])
                and turn_start(self.pattern, _decode(self.tokenizer, ids)) is not None
            ):
                done[row] = True
        return done
