"""SMA's interpretable units, their perturbed forms and the random masks over them (pure; no model).

* Units (§IV-B): the query (and, with ``scope="query+context"``, the context) split into tokens, words or
  sentences whose concatenation is exactly the segment's text.
* Perturbations (Alg. 1, lines 3–8): a masked unit is replaced by its baseline, the paper's character-level
  Unicode alteration (:func:`unicode_perturb`) or the empty string (removal).
* Masks: N binary masks m⁽ⁱ⁾ ∈ {0,1}^L, each element uniform; a mask that is all zeros gets one random
  element set to 1 (:func:`draw_masks`).
"""

from __future__ import annotations

import itertools
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

GRANULARITIES = ("token", "word", "sentence")
PERTURBATIONS = ("unicode", "remove")

QUERY = "query"
CONTEXT = "context"
"""The two segments a unit can belong to."""


@dataclass(frozen=True)
class Unit:
    """One interpretable feature: an exact piece of the query or the context.

    The pieces of a segment concatenate back to the segment's text; whitespace belongs to the unit that
    follows it (``" Paris"``).

    Attributes:
        text: the piece of text.
        segment: :data:`QUERY` or :data:`CONTEXT`.
    """

    text: str
    segment: str

    def to_dict(self) -> dict[str, str]:
        return {"text": self.text, "segment": self.segment}


_WORD = re.compile(r"\s*\S+")
_SENTENCE_END = re.compile(r"(?:[.!?…]+[\"'”’)\]]*(?=\s)|\n+)")


def _attach_trailing(pieces: list[str], text: str) -> list[str]:
    """Append whatever ``pieces`` miss at the end of ``text`` (trailing whitespace) to the last piece."""
    joined = "".join(pieces)
    if joined != text:
        if not pieces:
            return [text] if text else []
        rest = text[len(joined) :]
        pieces[-1] += rest
    return pieces


def _cut(text: str, cuts: Sequence[int]) -> list[str]:
    """Split ``text`` at ``cuts`` (character positions), moving each cut left over whitespace so that
    whitespace starts the following piece."""
    fixed: list[int] = []
    previous = 0
    for c in sorted({int(c) for c in cuts}):
        if c <= previous or c >= len(text):
            continue
        while c - 1 > previous and text[c - 1].isspace():
            c -= 1
        if c > previous:
            fixed.append(c)
            previous = c
    bounds = [0, *fixed, len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds) if b > a]


def _token_pieces(text: str, tokenizer: Any) -> list[str] | None:
    """The tokenizer's pieces of ``text`` (from character offsets, else token by token), or ``None`` when
    neither reproduces the text exactly."""
    try:
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        offsets = enc["offset_mapping"]
    except (NotImplementedError, TypeError, KeyError, ValueError):
        offsets = None  # a slow tokenizer has no character offsets
    if offsets:
        pieces = _cut(text, [start for start, _ in offsets])
        if "".join(pieces) == text:
            return pieces
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    pieces = [tokenizer.decode([i]) for i in ids]
    if "".join(pieces) == text:
        return [p for p in pieces if p]
    return None


def split_units(text: str, granularity: str, tokenizer: Any = None) -> list[str]:
    """Split ``text`` into units whose concatenation is exactly ``text``.

    Args:
        text: the segment (query or context).
        granularity: ``"token"`` (needs ``tokenizer``; a fast tokenizer's character offsets), ``"word"``
            (whitespace-separated) or ``"sentence"`` (ends at ``.``, ``!``, ``?``, ``…`` followed by
            whitespace, and at newlines).
        tokenizer: the model's tokenizer (token granularity only).

    Returns:
        The units, in order; empty for an empty text. A tokenizer whose pieces do not reproduce the text
        falls back to words (logged).

    Raises:
        ValueError: unknown granularity, or token granularity without a tokenizer.
    """
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {', '.join(GRANULARITIES)}, got {granularity!r}")
    if not text:
        return []
    if granularity == "word":
        return _attach_trailing([m.group(0) for m in _WORD.finditer(text)], text)
    if granularity == "sentence":
        pieces = _cut(text, [m.end() for m in _SENTENCE_END.finditer(text)])
        merged: list[str] = []  # a piece that is only whitespace joins its neighbor
        for p in pieces:
            if merged and (not p.strip() or not merged[-1].strip()):
                merged[-1] += p
            else:
                merged.append(p)
        return merged
    if tokenizer is None:
        raise ValueError("token granularity needs the model's tokenizer")
    pieces = _token_pieces(text, tokenizer)
    if pieces is not None:
        return pieces
    logger.warning("token granularity unavailable for this tokenizer; using words")
    return split_units(text, "word")


_HOMOGLYPHS = {
    "a": "а", "c": "с", "e": "е", "i": "і", "j": "ј", "o": "о", "p": "р", "s": "ѕ", "x": "х", "y": "у",
    "A": "А", "B": "В", "C": "С", "E": "Е", "H": "Н", "I": "І", "J": "Ј", "K": "К", "M": "М", "O": "О",
    "P": "Р", "S": "Ѕ", "T": "Т", "X": "Х", "Y": "Ү",
}  # fmt: skip


def unicode_perturb(text: str) -> str:
    """The paper's character-level Unicode alteration, made deterministic.

    Every ASCII letter or digit becomes a look-alike from another script (Cyrillic where one exists, else
    its fullwidth form); other characters, whitespace included, are kept. Non-ASCII letters get a combining
    low line (U+0332).
    """
    out = []
    for ch in text:
        if ch in _HOMOGLYPHS:
            out.append(_HOMOGLYPHS[ch])
        elif ch.isascii() and ch.isalnum():
            out.append(chr(ord(ch) + 0xFEE0))
        elif ch.isalnum():
            out.append(ch + "\u0332")
        else:
            out.append(ch)
    return "".join(out)


def baseline_of(unit: str, perturbation: str) -> str:
    """The text that replaces a masked unit: its Unicode alteration, or ``""`` for removal.

    Raises:
        ValueError: unknown perturbation.
    """
    if perturbation == "remove":
        return ""
    if perturbation == "unicode":
        return unicode_perturb(unit)
    raise ValueError(f"perturbation must be one of {', '.join(PERTURBATIONS)}, got {perturbation!r}")


def draw_masks(n: int, n_units: int, rng: np.random.Generator) -> np.ndarray:
    """N uniform binary masks over ``n_units`` units; an all-zero row gets one random 1 (Alg. 1, 4–7).

    Args:
        n: number of masks N.
        n_units: number of units L (≥ 1).
        rng: the generator to draw from (the caller's, seeded: nothing process-wide is used).

    Returns:
        ``(n, n_units)`` int64 of 0/1.

    Raises:
        ValueError: ``n_units < 1``.
    """
    if n_units < 1:
        raise ValueError("there are no units to perturb")
    masks = rng.integers(0, 2, size=(n, n_units), dtype=np.int64)
    for row in np.flatnonzero(masks.sum(axis=1) == 0):
        masks[row, rng.integers(0, n_units)] = 1
    return masks
