"""The words of the agreement view: short detector names, each group's own words and the per-group summary.

Split from :mod:`core.detectors.agreement` (which re-exports every name here). A detector's own words (its
short name, its note) are part of its declaration (:class:`core.detectors.registry.Detector`). Detectors answer
different questions (:data:`core.detectors.registry.GROUPS`), so each group speaks its own words (:data:`GROUP_WORDS`):

* **context reliance** — *Read from the context* / *Recalled from memory* (:mod:`core.engine.verdict`'s words:
  did the answer need the context?);
* **parametric knowledge** — the model gives this answer without the context / not without it;
* **familiarity of the context text** — the context text looks familiar / unfamiliar to the model (membership
  of the context, not whether the answer read it);
* **recall vs reasoning** (RADAR, the query alone) — recall-type / reasoning-type query, never read/recalled;
* **source attribution** (SMA) — whether switching the context on changes which words drive the answer.

A detector's ``verdict`` keeps the shared values (``recalled`` = the memorized side of its threshold, ``read``
= the other side; RADAR's ``recall-type`` / ``reasoning-type``); :func:`finding` and :func:`says` translate it
into its group's token and words. A group's summary (:func:`group_summary`) says what its detectors measure and,
for the two groups that feed the headline, which of them disagree with the headline's axis and why (each one's
score against its own threshold); it never counts detectors — no "5 of 10 say X" — and never mixes groups.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from core.detectors.registry import (
    CONTEXT_FAMILIARITY,
    CONTEXT_RELIANCE,
    CONTEXT_TEXT,
    GROUNDED_HIGH,
    GROUPS,
    MEMORIZED_HIGH,
    PARAMETRIC_KNOWLEDGE,
    PROMPT_STATES,
    QUERY_TEXT,
    RECALL_VS_REASONING,
    RETRIEVAL_TRACE,
    SOURCE_ATTRIBUTION,
    get,
)
from core.engine import axes as axes_words
from core.engine.verdict import DISPLAY, READ, RECALLED, VERDICTS, normalize_verdict

if TYPE_CHECKING:
    from core.detectors.agreement import DetectorVerdict

RECALL_TYPE = "recall-type"
"""RADAR's label for a query that looks like recall (its own axis: not a read/recalled verdict)."""
REASONING_TYPE = "reasoning-type"
"""RADAR's label for a query that looks like reasoning."""
OTHER_AXIS_DISPLAY = {
    RECALL_TYPE: "Recall-type query (RADAR)",
    REASONING_TYPE: "Reasoning-type query (RADAR)",
}
"""How a page shows the labels of a detector that answers another question than read/recalled."""

HEADLINE_GROUPS = (CONTEXT_RELIANCE, PARAMETRIC_KNOWLEDGE)
"""The groups whose evidence feeds the headline verdict (its two axes); the others never do."""


@dataclass(frozen=True)
class GroupWords:
    """How one group of detectors speaks.

    Attributes:
        title: the group's name (``"Context reliance"``).
        memorized_side / grounded_side: what a score on the memorized / grounded side of its threshold says,
            as a row of a table shows it.
        memorized_claim / grounded_claim: the same, as the summary line says it ("… say <claim>").
        memorized_token / grounded_token: the machine-readable ``finding`` of the JSON.
        higher_memorized / higher_grounded: the direction of a score whose higher values lie on that side.
        primary: which side the summary line counts first (``"memorized"`` or ``"grounded"``).
        cannot: what the group cannot conclude (docs and captions).
    """

    title: str
    memorized_side: str
    grounded_side: str
    memorized_claim: str
    grounded_claim: str
    memorized_token: str
    grounded_token: str
    higher_memorized: str
    higher_grounded: str
    primary: str
    cannot: str

    def side(self, memorized: bool) -> str:
        """The row words of one side."""
        return self.memorized_side if memorized else self.grounded_side


_WORDS: dict[str, dict[str, str]] = {
    CONTEXT_RELIANCE: {
        "title": "Context reliance",
        "memorized_side": DISPLAY[RECALLED],
        "grounded_side": DISPLAY[READ],
        "memorized_claim": "the answer did not need the context",
        "grounded_claim": "the answer needed the context",
        "memorized_token": RECALLED,
        "grounded_token": READ,
        "higher_memorized": "higher = less reliance on the context (toward recalled)",
        "higher_grounded": "higher = more reliance on the context (toward read)",
        "primary": GROUNDED_HIGH,
        "cannot": "whether the model would give the same answer without the context, or whether that answer is true",
    },
    PARAMETRIC_KNOWLEDGE: {
        "title": "Parametric knowledge",
        "memorized_side": "The model gives this answer without the context",
        "grounded_side": "Not without the context",
        "memorized_claim": "the model gives this answer without the context",
        "grounded_claim": "it does not give it without the context",
        "memorized_token": "without-context",
        "grounded_token": "not-without-context",
        "higher_memorized": "higher = more likely the model gives this answer without the context",
        "higher_grounded": "higher = less likely the model gives this answer without the context",
        "primary": MEMORIZED_HIGH,
        "cannot": "whether this answer used the context (a known fact can still be read from a context that states it)",
    },
    CONTEXT_FAMILIARITY: {
        "title": "Familiarity of the context text",
        "memorized_side": "The context text looks familiar to the model",
        "grounded_side": "The context text looks unfamiliar to the model",
        "memorized_claim": "the context text looks familiar to the model",
        "grounded_claim": "it looks unfamiliar",
        "memorized_token": "familiar",
        "grounded_token": "unfamiliar",
        "higher_memorized": "higher = the context text looks more familiar to the model",
        "higher_grounded": "higher = the context text looks less familiar to the model",
        "primary": MEMORIZED_HIGH,
        "cannot": "whether the answer read the context: they score the context text alone, not the answer",
    },
    RECALL_VS_REASONING: {
        "title": "Recall vs reasoning (the query alone)",
        "memorized_side": OTHER_AXIS_DISPLAY[RECALL_TYPE],
        "grounded_side": OTHER_AXIS_DISPLAY[REASONING_TYPE],
        "memorized_claim": "the query looks like a recall task",
        "grounded_claim": "the query looks like a reasoning task",
        "memorized_token": RECALL_TYPE,
        "grounded_token": REASONING_TYPE,
        "higher_memorized": "higher = the query looks more like a recall task",
        "higher_grounded": "higher = the query looks more like a reasoning task",
        "primary": MEMORIZED_HIGH,
        "cannot": "anything about this answer or the context: it reads the query alone",
    },
    SOURCE_ATTRIBUTION: {
        "title": "Source attribution",
        "memorized_side": "The query's words drive the answer alike with and without the context",
        "grounded_side": "The context changes which words drive the answer",
        "memorized_claim": "the query's words drive the answer alike with and without the context",
        "grounded_claim": "switching the context on changes which words drive the answer",
        "memorized_token": "attribution-unchanged",
        "grounded_token": "attribution-shifted",
        "higher_memorized": "higher = the query's words drive the answer more alike with and without the context",
        "higher_grounded": "higher = switching the context on changes more how the query's words drive the answer",
        "primary": GROUNDED_HIGH,
        "cannot": "whether the text was in the training data, or whether the answer is true",
    },
}
"""The table of every group's words: one record per group, field name → words (the fields of :class:`GroupWords`)."""
GROUP_WORDS: dict[str, GroupWords] = {group: GroupWords(**words) for group, words in _WORDS.items()}
"""Each group's own words, keyed like :data:`core.detectors.registry.GROUPS` (same order)."""

MEMORIZED_SIDE = (RECALLED, RECALL_TYPE)
GROUNDED_SIDE = (READ, REASONING_TYPE)


def group_of(group: str | None) -> str:
    """``group`` when it is a known group, else context reliance (the shared words)."""
    return group if group in GROUP_WORDS else CONTEXT_RELIANCE


def question(group: str) -> str:
    """The question the group answers (:data:`core.detectors.registry.GROUPS`)."""
    return GROUPS[group_of(group)]


def direction(group: str | None, higher_means: str) -> str:
    """``"higher = …"`` for a score of ``group`` whose higher values mean ``higher_means``, in the group's words."""
    words = GROUP_WORDS[group_of(group)]
    return words.higher_memorized if higher_means == MEMORIZED_HIGH else words.higher_grounded


def finding(group: str | None, verdict: str) -> str:
    """The machine-readable finding of a verdict in its group's terms (``"familiar"``, ``"recall-type"``, …);
    ``"inconclusive"`` / ``"uncalibrated"`` stay as they are."""
    words = GROUP_WORDS[group_of(group)]
    if verdict in MEMORIZED_SIDE:
        return words.memorized_token
    if verdict in GROUNDED_SIDE:
        return words.grounded_token
    return normalize_verdict(verdict) if verdict in VERDICTS else verdict


def says(group: str | None, verdict: str) -> str:
    """What a verdict says, in its group's own words (a table cell)."""
    words = GROUP_WORDS[group_of(group)]
    if verdict in MEMORIZED_SIDE:
        return words.memorized_side
    if verdict in GROUNDED_SIDE:
        return words.grounded_side
    return verdict_words(verdict)


AXIS_TITLES = {
    CONTEXT_RELIANCE: "Headline axis 1 (context reliance)",
    PARAMETRIC_KNOWLEDGE: "Headline axis 2 (parametric support)",
}
"""How the agreement view names the headline's axis beside the group that feeds it."""


def _num(value: object) -> str:
    return f"{float(value):.3g}" if isinstance(value, (int, float)) else "—"


def axis_line(group: str, axis: dict) -> str:
    """One sentence on the headline's axis of ``group`` (an ``Axis.to_dict()`` of :mod:`core.engine.axes`): its
    state, its score against its threshold and band, and the direction of the score."""
    title = AXIS_TITLES.get(group_of(group), "Headline axis")
    state = str(axis.get("state") or "no state")
    score, threshold, band = axis.get("score"), axis.get("threshold"), axis.get("band")
    if score is None and threshold is None:
        measured = "no axis calibration for this model"
    elif score is None:
        measured = "no score for this answer"
    else:
        measured = f"score {_num(score)}" + (f" against {_num(threshold)}" if threshold is not None else "")
        if band and len(band) == 2 and band[0] < band[1]:
            measured += f", undecided from {_num(band[0])} to {_num(band[1])}"
    direction = str(axis.get("direction") or "")
    return f"{title}: {state} — {measured}" + (f"; {direction}." if direction else ".")


def verdict_words(verdict: str) -> str:
    """The shared words of a verdict value, or RADAR's own labels (group-blind; prefer :func:`says`)."""
    return OTHER_AXIS_DISPLAY.get(verdict) or DISPLAY[normalize_verdict(verdict)]


def short_name(name: str) -> str:
    """A detector's short human name, from its declaration (``Detector.short``); an unknown name as it is."""
    detector = get(name)
    return name if detector is None else detector.short_name


def _names(verdicts: Sequence[DetectorVerdict]) -> str:
    return _join([short_name(v.name) for v in verdicts])


def _join(labels: Sequence[str]) -> str:
    return labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + " and " + labels[-1]


READ_WORDS = {
    RETRIEVAL_TRACE: "the attention and MLPs along the answer",
    PROMPT_STATES: "the hidden state at the last prompt token",
    CONTEXT_TEXT: "the context text alone",
    QUERY_TEXT: "the query alone",
}
"""What a detector measures, by what its declaration says it reads (``Detector.reads``)."""
FROM_THE_RUN = "the two paths' token distributions over the answer"
"""What a detector that reads nothing beyond the run's result measures (the per-token KL and its statistics)."""
FROM_GENERATIONS = "extra generations"
STACKED = "several of these, stacked"


def measures(name: str) -> str:
    """What the detector ``name`` measures, in a few words, from its declaration (what it reads and its cost)."""
    detector = get(name)
    if detector is None:
        return FROM_THE_RUN
    if len(detector.reads) > 1:
        return STACKED
    if detector.reads:
        return READ_WORDS[next(iter(detector.reads))]
    return FROM_THE_RUN if detector.is_cheap else FROM_GENERATIONS


def _measured(rows: Sequence[DetectorVerdict]) -> str:
    """ "<what> (<detectors>); …" for a group's rows, in the order each kind of measurement first appears."""
    kinds: dict[str, list[DetectorVerdict]] = {}
    for v in rows:
        kinds.setdefault(measures(v.name), []).append(v)
    return "; ".join(f"{kind} ({_names(members)})" for kind, members in kinds.items())


AXIS_SIDES = {
    axes_words.NEEDED: GROUNDED_HIGH,
    axes_words.NOT_NEEDED: MEMORIZED_HIGH,
    axes_words.SUPPORTED: MEMORIZED_HIGH,
    axes_words.UNSUPPORTED: GROUNDED_HIGH,
}
"""The side of a threshold that each decided state of the headline's axes stands for (``mixed`` stands for none)."""


def headline_side(axis: Mapping[str, Any] | None) -> str | None:
    """``"memorized"`` / ``"grounded"``: the side the headline's axis (an ``Axis.to_dict()``) took, else ``None``."""
    return None if not axis else AXIS_SIDES.get(str(axis.get("state")))


def side_of(verdict: str) -> str | None:
    """The side of its threshold a verdict lies on (``"memorized"`` / ``"grounded"``), ``None`` for no verdict."""
    if verdict in MEMORIZED_SIDE:
        return MEMORIZED_HIGH
    if verdict in GROUNDED_SIDE:
        return GROUNDED_HIGH
    return None


def against_headline(verdict: DetectorVerdict, axis: Mapping[str, Any] | None) -> str | None:
    """``"agrees"`` / ``"disagrees"`` with the headline's axis of the row's group, ``None`` when either has no side."""
    axis_side, own = headline_side(axis), side_of(verdict.verdict)
    if axis_side is None or own is None:
        return None
    return "agrees" if own == axis_side else "disagrees"


def side_word(group: str | None, side: str) -> str:
    """A side of a group's thresholds in one or two words (``"read"``, ``"recalled"``, ``"familiar"``, …)."""
    words = GROUP_WORDS[group_of(group)]
    return (words.memorized_token if side == MEMORIZED_HIGH else words.grounded_token).replace("-", " ")


def _why(v: DetectorVerdict) -> str:
    """Where the row's score lies against its own threshold, and what that side means (why it is on its side):
    "above" alone read like agreement for a detector whose higher scores mean the other side."""
    if v.score is None or v.threshold is None:
        return short_name(v.name)
    above = f"above means {side_word(v.group, v.higher_means)}"
    side = side_of(v.verdict)
    if v.score == v.threshold or side is None:
        return f"{short_name(v.name)} {v.score:.3g}, at its threshold {v.threshold:.3g} ({above})"
    where = f"on the “{side_word(v.group, side)}” side of its threshold"
    return f"{short_name(v.name)} {v.score:.3g}, {where} {v.threshold:.3g} ({above})"


def group_summary(group: str, verdicts: Sequence[DetectorVerdict], axis: Mapping[str, Any] | None = None) -> str:
    """What one group's detectors measure and where they disagree with the headline, and why — never a count.

    ``axis`` is the headline's axis that the group feeds (an ``Axis.to_dict()`` of :mod:`core.engine.axes`; ``None``
    for a group that does not feed the headline). The sentence names the group's detectors by what they measure
    (:func:`measures`), then: for a group whose axis took a side, the detectors that agree with it and those that
    disagree, each with its score against its own threshold (why it sits on the other side); otherwise which
    detectors find what. Detectors without a verdict are named once. Never mixes groups: ``verdicts`` of another
    group are ignored; never counts detectors against each other (a split is shown, not tallied).
    """
    g = group_of(group)
    words = GROUP_WORDS[g]
    rows = [v for v in verdicts if group_of(v.group) == g]
    head = f"{words.title}: "
    if not rows:
        return head + "no detector of this group has run on this example."
    claims = {MEMORIZED_HIGH: words.memorized_claim, GROUNDED_HIGH: words.grounded_claim}
    by_side = {side: [v for v in rows if side_of(v.verdict) == side] for side in claims}
    open_rows = [v for v in rows if side_of(v.verdict) is None]
    tail = ""
    if open_rows:
        tail = f" No verdict here from {_names(open_rows)} (no score, no threshold or too close to call)."
    text = f"{head}measured by {_measured(rows)}."
    if not any(by_side.values()):
        return text + tail
    axis_side = headline_side(axis)
    if axis_side is not None:
        agree, disagree = by_side[axis_side], by_side[MEMORIZED_HIGH if axis_side == GROUNDED_HIGH else GROUNDED_HIGH]
        text += f" The headline's axis says {claims[axis_side]}"
        text += f"; {_names(agree)} {_say(agree)} so too." if agree else "."
        if disagree:
            each = "It compares" if len(disagree) == 1 else "Each compares"
            text += (
                f" Disagreeing with it: {_join([_why(v) for v in disagree])}. {each} its own measurement with its own "
                "threshold, set on other rows, while the axis weighs its own observations: where they part, this "
                "example's evidence is mixed, and it is not outvoted either way."
            )
        else:
            text += " No detector of the group disagrees with it."
        return text + tail
    if axis is not None:
        text += " The headline's axis leaves it open here."
    order = [MEMORIZED_HIGH, GROUNDED_HIGH] if words.primary == MEMORIZED_HIGH else [GROUNDED_HIGH, MEMORIZED_HIGH]
    found = [f"{_names(by_side[side])} {_find(by_side[side])} {claims[side]}" for side in order if by_side[side]]
    return f"{text} {'; '.join(found)}." + tail


def _say(rows: Sequence[DetectorVerdict]) -> str:
    return "says" if len(rows) == 1 else "say"


def _find(rows: Sequence[DetectorVerdict]) -> str:
    return "finds" if len(rows) == 1 else "find"


def groups_in(verdicts: Iterable[DetectorVerdict]) -> list[str]:
    """The groups that ``verdicts`` belong to, in :data:`GROUPS` order."""
    present = {group_of(v.group) for v in verdicts}
    return [g for g in GROUPS if g in present]


def summary_lines(
    verdicts: Sequence[DetectorVerdict], axes: Mapping[str, Mapping[str, Any]] | None = None
) -> list[tuple[str, str]]:
    """``(group, sentence)`` for every group with a detector in ``verdicts``, in :data:`GROUPS` order; ``axes`` are the
    headline's axes by the group they belong to (:func:`core.detectors.agreement.headline_axes`)."""
    return [(g, group_summary(g, verdicts, (axes or {}).get(g))) for g in groups_in(verdicts)]


def summary_line(verdicts: Sequence[DetectorVerdict], axes: Mapping[str, Mapping[str, Any]] | None = None) -> str:
    """Every group's sentence, one after the other (each within its own group; none counts detectors)."""
    lines = summary_lines(verdicts, axes)
    if not lines:
        return "No detector has run on this example."
    return " ".join(line for _, line in lines)
