"""core.detectors.wording: each group of detectors speaks its own words (issue 23 part 3) and its summary says what its
detectors measure and who disagrees with the headline and why, never a count (issue 38 part 3).

The expected sentences are written out by hand from the group's question; the verdicts are hand-made rows.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re

import pytest

from core.detectors import available
from core.detectors.agreement import DetectorVerdict
from core.detectors.registry import (
    CONTEXT_FAMILIARITY,
    CONTEXT_RELIANCE,
    GROUNDED_HIGH,
    GROUPS,
    MEMORIZED_HIGH,
    PARAMETRIC_KNOWLEDGE,
    RECALL_VS_REASONING,
    SOURCE_ATTRIBUTION,
)
from core.detectors.wording import (
    GROUP_WORDS,
    HEADLINE_GROUPS,
    REASONING_TYPE,
    RECALL_TYPE,
    direction,
    finding,
    group_summary,
    says,
    summary_line,
    summary_lines,
)
from core.engine.verdict import DISPLAY, INCONCLUSIVE, READ, RECALLED, UNCALIBRATED

READ_OR_RECALLED = {DISPLAY[READ], DISPLAY[RECALLED]}
WORDS_DIGEST = "75cd6a271219b82fba30f4723603df9bb381aa2ea7548ed13087a7c4af9f7a40"
"""sha256 of the JSON of every group's words (all fields, in GROUPS order), taken before the words became one
table: any word that changes changes it."""


def _v(name: str, verdict: str, higher: str = GROUNDED_HIGH, score: float = 1.0, threshold: float = 1.0):
    return DetectorVerdict(name, name, higher, score, threshold, "s", verdict, "free")


NEEDED = {"state": "needed", "score": 0.9, "threshold": 0.5, "band": [0.4, 0.6], "direction": "higher = read"}
NOT_NEEDED = NEEDED | {"state": "not needed", "score": 0.1}
MIXED = NEEDED | {"state": "mixed", "score": 0.5}


def test_every_group_has_its_words_in_the_registry_order() -> None:
    assert list(GROUP_WORDS) == list(GROUPS), "one set of words per group, in GROUPS order"
    assert HEADLINE_GROUPS == (CONTEXT_RELIANCE, PARAMETRIC_KNOWLEDGE), "only the first two feed the headline"
    assert all(d.group in GROUP_WORDS for d in available().values())


def test_every_word_of_every_group_is_unchanged() -> None:
    words = {group: dataclasses.asdict(w) for group, w in GROUP_WORDS.items()}
    assert hashlib.sha256(json.dumps(words, ensure_ascii=False).encode()).hexdigest() == WORDS_DIGEST
    assert all(all(dataclasses.asdict(w).values()) for w in GROUP_WORDS.values()), "no field left blank"


@pytest.mark.parametrize(
    ("group", "memorized", "grounded"),
    [
        (CONTEXT_RELIANCE, "Recalled from memory", "Read from the context"),
        (PARAMETRIC_KNOWLEDGE, "The model gives this answer without the context", "Not without the context"),
        (
            CONTEXT_FAMILIARITY,
            "The context text looks familiar to the model",
            "The context text looks unfamiliar to the model",
        ),
        (RECALL_VS_REASONING, "Recall-type query (RADAR)", "Reasoning-type query (RADAR)"),
    ],
)
def test_each_group_says_its_own_words(group: str, memorized: str, grounded: str) -> None:
    assert says(group, RECALLED) == memorized and says(group, READ) == grounded
    assert says(group, INCONCLUSIVE) == "Inconclusive" and says(group, UNCALIBRATED) == "No threshold"


@pytest.mark.parametrize("group", [PARAMETRIC_KNOWLEDGE, CONTEXT_FAMILIARITY, RECALL_VS_REASONING, SOURCE_ATTRIBUTION])
@pytest.mark.parametrize("verdict", [RECALLED, READ, RECALL_TYPE, REASONING_TYPE])
def test_only_context_reliance_says_read_or_recalled(group: str, verdict: str) -> None:
    words = says(group, verdict)
    assert words not in READ_OR_RECALLED
    assert "Read from" not in words and "Recalled from" not in words
    assert finding(group, verdict) not in (READ, RECALLED), "the JSON's finding speaks the group's words too"


def test_radar_rows_never_say_read_or_recalled_whatever_their_verdict() -> None:
    for verdict in (READ, RECALLED, RECALL_TYPE, REASONING_TYPE):
        row = _v("radar", verdict, MEMORIZED_HIGH)
        assert row.group == RECALL_VS_REASONING, "the group comes from the registry"
        assert row.says not in READ_OR_RECALLED and "RADAR" in row.says
    assert "read" not in group_summary(RECALL_VS_REASONING, [_v("radar", RECALL_TYPE)]).lower().split()


def test_sma_speaks_of_which_words_drive_the_answer() -> None:
    for verdict in (READ, RECALLED):
        words = _v("sma", verdict).says
        assert "words drive the answer" in words and words not in READ_OR_RECALLED
    assert finding(SOURCE_ATTRIBUTION, READ) == "attribution-shifted"


def test_every_direction_is_stated_in_its_groups_words() -> None:
    for detector in available().values():
        text = direction(detector.group, detector.higher_means)
        assert text.startswith("higher = "), detector.name
    assert direction(CONTEXT_FAMILIARITY, GROUNDED_HIGH) == "higher = the context text looks less familiar to the model"
    assert (
        direction(CONTEXT_FAMILIARITY, MEMORIZED_HIGH) == "higher = the context text looks more familiar to the model"
    )
    assert "toward read" in direction(CONTEXT_RELIANCE, GROUNDED_HIGH)
    assert "recall task" in direction(RECALL_VS_REASONING, MEMORIZED_HIGH)
    assert "read" not in direction(RECALL_VS_REASONING, MEMORIZED_HIGH).split()


ROWS = [
    _v("repcs", READ, score=9.0, threshold=4.3),
    _v("repcs_mean", READ),
    _v("max_token_kl", READ),
    _v("crm_l2", RECALLED, MEMORIZED_HIGH, score=2.5, threshold=1.75),
    _v("ppl", RECALLED),
    _v("zlib", RECALLED),
    _v("min_k_10", RECALLED, MEMORIZED_HIGH),
    _v("radar", RECALL_TYPE, MEMORIZED_HIGH),
    _v("selfcritique", RECALLED, MEMORIZED_HIGH),
]


def test_no_summary_counts_detectors() -> None:
    """Issue 38 part 3: each group box read "5 of 10 say X; 5 say Y", an invitation to a vote count."""
    for axes in ({}, {CONTEXT_RELIANCE: NEEDED}, {CONTEXT_RELIANCE: NOT_NEEDED}, {CONTEXT_RELIANCE: MIXED}):
        whole = summary_line(ROWS, axes)
        assert not re.findall(r"\b\d+ of \d+\b", whole) and "all 3" not in whole and "more give" not in whole
        assert not re.search(r"\b(one|two|three|four|five|\d+) (say|says|detectors?)\b", whole)
        assert "They agree" not in whole and "They conflict" not in whole and "detectors say" not in whole


def test_a_summary_says_what_its_detectors_measure() -> None:
    lines = dict(summary_lines(ROWS))
    assert list(lines) == [CONTEXT_RELIANCE, PARAMETRIC_KNOWLEDGE, CONTEXT_FAMILIARITY, RECALL_VS_REASONING]
    assert lines[CONTEXT_RELIANCE] == (
        "Context reliance: measured by the two paths' token distributions over the answer (RePCS, mean KL and max "
        "KL); the hidden state at the last prompt token (CRM L2-norm). RePCS, mean KL and max KL find the answer "
        "needed the context; CRM L2-norm finds the answer did not need the context."
    )
    assert lines[PARAMETRIC_KNOWLEDGE] == (
        "Parametric knowledge: measured by extra generations (Self-Critique). Self-Critique finds the model gives "
        "this answer without the context."
    )
    assert lines[CONTEXT_FAMILIARITY] == (
        "Familiarity of the context text: measured by the context text alone (perplexity, zlib and Min-10%). "
        "perplexity, zlib and Min-10% find the context text looks familiar to the model."
    )
    assert lines[RECALL_VS_REASONING] == (
        "Recall vs reasoning (the query alone): measured by the query alone (RADAR). RADAR finds the query looks "
        "like a recall task."
    )
    assert summary_line(ROWS) == " ".join(lines.values())


def test_a_headline_group_names_who_disagrees_with_its_axis_and_why() -> None:
    """Green snow: the headline said *Read from the context* above a RePCS box saying *Recalled from memory*, and the
    page never said why. The group now names the detectors on the other side of its axis, each with its score
    against its own threshold."""
    line = group_summary(CONTEXT_RELIANCE, ROWS, NEEDED)
    assert "The headline's axis says the answer needed the context; RePCS, mean KL and max KL say so too." in line
    # which side of its threshold the score is on, in words, and what "above" means for it (issue 45: "CRM LTS
    # −0.13 above its threshold −0.369" read like agreement for a detector that disagrees)
    assert (
        "Disagreeing with it: CRM L2-norm 2.5, on the “recalled” side of its threshold 1.75 (above means recalled)."
        in line
    )
    assert "its own threshold" in line and "not outvoted" in line
    flipped = group_summary(CONTEXT_RELIANCE, ROWS, NOT_NEEDED)
    assert "axis says the answer did not need the context; CRM L2-norm says so too." in flipped
    assert (
        "Disagreeing with it: RePCS 9, on the “read” side of its threshold 4.3 (above means read), mean KL 1, at its "
        in flipped
    )
    agreeing = group_summary(CONTEXT_RELIANCE, ROWS[:3], NEEDED)
    assert agreeing.endswith("No detector of the group disagrees with it.")
    open_axis = group_summary(CONTEXT_RELIANCE, ROWS, MIXED)
    assert "The headline's axis leaves it open here." in open_axis and "Disagreeing" not in open_axis


def test_each_row_agrees_or_disagrees_with_its_groups_axis() -> None:
    from core.detectors.wording import against_headline

    assert against_headline(ROWS[0], NEEDED) == "agrees" and against_headline(ROWS[3], NEEDED) == "disagrees"
    assert against_headline(ROWS[3], NOT_NEEDED) == "agrees"
    assert against_headline(ROWS[0], MIXED) is None and against_headline(ROWS[0], None) is None
    assert against_headline(_v("repcs", INCONCLUSIVE), NEEDED) is None


def test_a_group_summarizes_only_its_own_rows() -> None:
    rows = [_v("repcs", READ), _v("ppl", RECALLED), _v("zlib", RECALLED)]
    assert group_summary(CONTEXT_RELIANCE, rows) == (
        "Context reliance: measured by the two paths' token distributions over the answer (RePCS). RePCS finds the "
        "answer needed the context."
    )
    assert group_summary(PARAMETRIC_KNOWLEDGE, []) == (
        "Parametric knowledge: no detector of this group has run on this example."
    )


def test_an_axis_line_states_its_state_score_band_and_direction() -> None:
    from core.detectors.wording import axis_line

    axis = {"state": "needed", "score": 0.93, "threshold": 0.5, "band": [0.4, 0.6], "direction": "higher = read"}
    assert axis_line(CONTEXT_RELIANCE, axis) == (
        "Headline axis 1 (context reliance): needed — score 0.93 against 0.5, undecided from 0.4 to 0.6; higher = read."
    )
    empty = {"state": "mixed", "score": None, "threshold": None, "band": None, "direction": ""}
    assert axis_line(PARAMETRIC_KNOWLEDGE, empty) == (
        "Headline axis 2 (parametric support): mixed — no axis calibration for this model."
    )
    assert "no score for this answer" in axis_line(PARAMETRIC_KNOWLEDGE, empty | {"threshold": -2.0})


def test_a_group_without_a_verdict_says_so_once() -> None:
    rows = [_v("redeep_pks", UNCALIBRATED, MEMORIZED_HIGH), _v("selfcritique", INCONCLUSIVE, MEMORIZED_HIGH)]
    assert group_summary(PARAMETRIC_KNOWLEDGE, rows) == (
        "Parametric knowledge: measured by the attention and MLPs along the answer (ReDeEP PKS); extra generations "
        "(Self-Critique). No verdict here from ReDeEP PKS and Self-Critique (no score, no threshold or too close to "
        "call)."
    )


def test_a_detector_whose_higher_scores_mean_read_says_so_below_its_threshold() -> None:
    """A score below a threshold whose upper side means *read* is on the *recalled* side: the words say the side,
    not only "below"."""
    from core.detectors.wording import _why

    row = _v("crm_l2", RECALLED, GROUNDED_HIGH, score=-0.369 - 0.5, threshold=-0.369)
    assert _why(row) == "CRM L2-norm -0.869, on the “recalled” side of its threshold -0.369 (above means read)"
