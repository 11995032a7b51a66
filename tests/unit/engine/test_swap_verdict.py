"""A decided swap test carries the headline where context and memory agree (:mod:`core.engine.swap_verdict`), the
internals' own prediction kept beside it, in the JSON and every reader."""

from __future__ import annotations

import pytest

from core.engine.headline_record import AGREES, ALSO_KNOWN, MIXED, RELIANCE, SUPPORT, Axis, Headline
from core.engine.swap import TYPE_MATCHED, SwapTest, Trial
from core.engine.swap_verdict import (
    ALWAYS,
    AUTO,
    NEVER,
    agreeing,
    carry,
    check_mode,
    disagrees,
    implausible,
    own,
    wants_swap,
)
from core.engine.swap_words import FOLLOWED, KEPT, NEITHER_OUTCOME
from core.engine.verdict import READ, RECALLED, UNCALIBRATED


def _head(verdict: str = RECALLED, in_context: bool = True, in_parametric: bool = True) -> Headline:
    axis = Axis(RELIANCE, MIXED, 0.4, 0.5, (0.3, 0.6), "", {})
    support = Axis(SUPPORT, MIXED, -1.0, -2.0, (-3.0, -1.5), "", {})
    span = {"span": {"text": "Paris"}, "in_context": in_context, "in_parametric": in_parametric}
    return Headline(verdict, AGREES, "The internals' reason.", axis, support, "test calibration", span=span)


def _test(outcome: str, source: str = "the model's own alternatives") -> SwapTest:
    trial = Trial("Lyon", source, "The capital is Lyon.", "Lyon.", outcome)
    reason = "With “Lyon” in place of “Paris”, the answer says “Lyon”: it follows the context"
    return SwapTest(outcome, "Paris", "Lyon", source, 1, "The capital is Lyon.", "Lyon.", reason, 1.0, (trial,))


def test_a_followed_swap_carries_read_and_keeps_the_internals_prediction() -> None:
    head = _head(RECALLED)
    carried = carry(head, _test(FOLLOWED))
    assert carried.verdict == READ and carried.qualifier == ALSO_KNOWN
    assert carried.internals == {"verdict": RECALLED, "title": head.title, "reason": head.reason}
    assert disagrees(carried) and own(carried)["verdict"] == RECALLED
    assert "swap test" in carried.reason and "the page goes by the swap test" in carried.reason
    # the JSON round trip keeps both
    back = Headline.from_dict(carried.to_dict())
    assert back.verdict == READ and back.internals == carried.internals


def test_a_kept_original_carries_recalled_and_agreement_is_said() -> None:
    carried = carry(_head(RECALLED), _test(KEPT))
    assert carried.verdict == RECALLED and carried.qualifier == AGREES
    assert not disagrees(carried) and "too" in carried.reason


def test_an_undecided_test_or_no_agreement_leaves_the_headline() -> None:
    head = _head(RECALLED)
    assert carry(head, _test(NEITHER_OUTCOME)) is head
    assert carry(head, None) is head
    other = _head(READ, in_parametric=False)  # context and memory do not agree: the text decides
    assert carry(other, _test(KEPT)) is other
    uncal = Headline(UNCALIBRATED, None, "", head.reliance, head.support, "", span=head.span)
    assert carry(uncal, _test(FOLLOWED)) is uncal


def test_carrying_twice_keeps_the_first_internals() -> None:
    once = carry(_head(RECALLED), _test(FOLLOWED))
    assert carry(once, _test(KEPT)) is once


def test_an_implausible_refusal_does_not_carry_and_is_said() -> None:
    test = _test(KEPT, source=TYPE_MATCHED)
    assert implausible(test)
    head = _head(READ)
    carried = carry(head, test)
    assert carried.verdict == READ and carried.internals is None
    assert "implausible" in carried.reason
    assert not implausible(_test(FOLLOWED, source=TYPE_MATCHED))


def test_when_a_run_is_swap_tested() -> None:
    head = _head()
    assert agreeing(head) and wants_swap(head, AUTO) and wants_swap(head, ALWAYS) and not wants_swap(head, NEVER)
    apart = _head(in_parametric=False)
    assert not agreeing(apart) and not wants_swap(apart, AUTO) and wants_swap(apart, ALWAYS)
    nospan = Headline(READ, None, "", head.reliance, head.support, "", span={"span": None})
    assert not wants_swap(nospan, ALWAYS)
    with pytest.raises(ValueError, match="auto, always, never"):
        check_mode("sometimes")


def test_the_default_mode_comes_from_the_environment(monkeypatch) -> None:
    from core.engine.swap_verdict import MODE_ENV, default_mode

    monkeypatch.delenv(MODE_ENV, raising=False)
    assert default_mode() == AUTO
    monkeypatch.setenv(MODE_ENV, " Never ")
    assert default_mode() == NEVER
    monkeypatch.setenv(MODE_ENV, "sometimes")
    with pytest.raises(ValueError, match="READ_OR_RECALL_SWAP must be one of auto, always, never"):
        default_mode()
