"""How far the internals carry the verdict: the headline beside rules that read no internals, against behavior.

Every figure of the headline is reported beside two baselines (the distance between them is what reading the
model's internals adds):

* the **text-only rule** (:func:`text_only_verdict`) reads no internals at all: take the answer's first word that
  is neither a stop word nor a word of the query; *recalled* if the no-context answer contains it, else *read* if
  the context contains it, else undecided;
* **axis 1 alone** (:func:`axis1_verdict`): *read* when context reliance says *needed*, *recalled* when it says
  *not needed*, undecided when *mixed* — the internals without any text comparison.

:func:`agreement` counts a verdict against behavior labels on the rows whose behavior is decided (``read`` /
``recalled``): the share that matches (an undecided verdict counts as a miss, as it does for a reader), per
behavior, and the share left *Inconclusive* / *Neither*. :func:`validity_figures` gives, for one set of rows, the
headline, both baselines, the headline on the rows where the text-only rule is wrong or undecided, and — on rows
whose context agrees with memory — the headline against the swap test's label.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from core.engine.span import answer_words, contains, content_words
from core.engine.verdict import INCONCLUSIVE, NEITHER, READ, RECALLED

BEHAVIORS = (READ, RECALLED)
UNDECIDED = "undecided"
MIN_PER_BEHAVIOR = 20
"""A behavior's own match rate is held to the bar only with at least this many rows."""


def text_only_verdict(query: str, context: str, answer: str, parametric_answer: str) -> str:
    """The text-only rule (no internals): the answer's first content word; ``recalled`` if the no-context answer
    contains it, else ``read`` if the context does, else :data:`UNDECIDED`."""
    words = content_words(answer_words([answer]), query)
    if not words:
        return UNDECIDED
    word = words[0].norm
    if contains(parametric_answer, word):
        return RECALLED
    if contains(context, word):
        return READ
    return UNDECIDED


def axis1_verdict(state: str) -> str:
    """Axis 1 alone: ``needed`` → read, ``not needed`` → recalled, else undecided."""
    return {"needed": READ, "not needed": RECALLED}.get(state, UNDECIDED)


def _rate(k: int, n: int) -> float | None:
    return round(k / n, 4) if n else None


def agreement(verdicts: Sequence[str], behaviors: Sequence[str]) -> dict[str, Any]:
    """A verdict against behavior on the behavior-decided rows (``read`` / ``recalled``).

    Returns:
        ``{"n", "match", "match_rate", "undecided_rate", "per_behavior": {b: {"n", "match", "match_rate"}}}``;
        ``undecided_rate`` is the share neither ``read`` nor ``recalled`` (*Inconclusive*, *Neither*, undecided).
    """
    pairs = [(v, b) for v, b in zip(verdicts, behaviors) if b in BEHAVIORS]
    n = len(pairs)
    match = sum(v == b for v, b in pairs)
    undecided = sum(v not in BEHAVIORS for v, _ in pairs)
    per = {}
    for b in BEHAVIORS:
        sub = [(v, x) for v, x in pairs if x == b]
        per[b] = {
            "n": len(sub),
            "match": sum(v == x for v, x in sub),
            "match_rate": _rate(sum(v == x for v, x in sub), len(sub)),
        }
    return {
        "n": n,
        "match": match,
        "match_rate": _rate(match, n),
        "undecided_rate": _rate(undecided, n),
        "per_behavior": per,
    }


def meets_bar(
    entry: Mapping[str, Any], *, match: float = 0.90, per_behavior: float = 0.75, undecided: float = 0.15
) -> bool:
    """Whether an :func:`agreement` entry meets the headline's bar (≥ 90 % of decided rows, ≥ 75 % of each behavior
    with at least :data:`MIN_PER_BEHAVIOR` rows, ≤ 15 % undecided)."""
    if not entry["n"]:
        return False
    ok = entry["match_rate"] >= match and entry["undecided_rate"] <= undecided
    for b in BEHAVIORS:
        sub = entry["per_behavior"][b]
        if sub["n"] >= MIN_PER_BEHAVIOR:
            ok = ok and sub["match_rate"] >= per_behavior
    return ok


def validity_figures(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The figures of one set of rows.

    Args:
        rows: dicts with ``behavior`` (``read`` / ``recalled`` / ``None``), ``headline`` (the headline's verdict),
            ``text_only``, ``axis1`` (the baselines' verdicts), ``relation`` (``agreeing`` rows get the swap
            comparison) and ``swap`` (the swap test's outcome or ``None``).

    Returns:
        ``{"headline", "text_only", "axis1"}`` (each an :func:`agreement`), ``"text_wrong"`` (the headline on the
        behavior-decided rows where the text-only rule is wrong or undecided), ``"swap_agreeing"`` (the headline
        against the swap test's label on agreeing rows where the swap test decides), and ``"meets_bar"``.
    """
    behaviors = [r.get("behavior") for r in rows]
    out: dict[str, Any] = {
        key: agreement([r[key] for r in rows], behaviors) for key in ("headline", "text_only", "axis1")
    }
    hard = [r for r in rows if r.get("behavior") in BEHAVIORS and r["text_only"] != r["behavior"]]
    out["text_wrong"] = agreement([r["headline"] for r in hard], [r["behavior"] for r in hard])
    agreeing = [r for r in rows if r.get("relation") == "agreeing" and r.get("swap") in BEHAVIORS]
    out["swap_agreeing"] = agreement([r["headline"] for r in agreeing], [r["swap"] for r in agreeing])
    out["meets_bar"] = meets_bar(out["headline"])
    return out


__all__ = [
    "INCONCLUSIVE",
    "NEITHER",
    "UNDECIDED",
    "agreement",
    "axis1_verdict",
    "meets_bar",
    "text_only_verdict",
    "validity_figures",
]
