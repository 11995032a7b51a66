"""The swap test beside the headline: a button with its cost estimate, then what the answer did when the context
changed (:mod:`core.engine.swap`). Model text is shown literally (code blocks), never as markdown."""

from __future__ import annotations

import time

import streamlit as st

from components import keys, widgets
from components.lru import session_lru
from components.progress import estimate_text
from components.run import run_cached
from components.text import escape_markdown
from core.engine.axes import Headline
from core.engine.estimate import Work, observe_run, prompt_tokens
from core.engine.result import DualPathResult, result_digest
from core.engine.swap import (
    FOLLOWED,
    KEPT,
    MAX_CANDIDATES,
    MAX_WORD_TOKENS,
    NEITHER_OUTCOME,
    NOT_APPLICABLE,
    SwapTest,
    Trial,
    planned_work,
    swap_test,
    with_swap_test,
)
from core.engine.swap_verdict import AUTO, NEVER, agreeing, default_mode, wants_swap
from core.engine.verdict import READ, RECALLED, display
from core.model.handle import ModelHandle

RUN_KIND = "swap_test"
"""The estimate's kind of a swap test (work: a :class:`~core.engine.estimate.Work`, :func:`planned`)."""
MAX_TESTS = 12
AGREE_INTRO = "Context and memory agree on the span: a swap test decides the verdict — "
EXPLAIN = (
    "Replace the answer span where it occurs in the context by a plausible alternative the model itself proposes, "
    "answer again with the changed context, and see whether the answer follows. Where context and memory agree, "
    "this is the only way to tell reading from recalling. It is one intervention on one word: behavioral evidence "
    "beside the headline, not a proof of the mechanism."
)


def planned(handle: ModelHandle, result: DualPathResult) -> tuple[int, int, int]:
    """:func:`core.engine.swap.planned_work` (the candidates to complete, their prompt's tokens, the answers it
    may generate); at most everything when it cannot tell."""
    try:
        return planned_work(handle, result)
    except (ValueError, TypeError, AttributeError, IndexError):
        return MAX_CANDIDATES, prompt_tokens(handle, result.query), MAX_CANDIDATES


def work(
    result: DualPathResult, plan: tuple[int, int, int], answers: int | None = None, steps: int | None = None,
    read: int | None = None,
) -> Work:  # fmt: skip
    """A swap test's units of work: the candidates' completions (:data:`MAX_WORD_TOKENS` batched steps, each
    candidate's prompt read), then its answers to the swapped contexts, decoded in one batch — as long as the run's
    own retrieval answer before the test; ``answers``, their longest ``steps`` and the tokens ``read`` after it."""
    candidates, prompt, planned_answers = plan
    answers = planned_answers if answers is None else answers
    total = MAX_WORD_TOKENS if candidates else 0
    tokens = candidates * prompt
    if answers:
        total += len(result.retrieval.token_ids) if steps is None else steps
        tokens += answers * result.retrieval.prompt_len if read is None else read
    return Work(steps=float(total), prompt_tokens=float(tokens))


def done_work(handle: ModelHandle, result: DualPathResult, plan: tuple[int, int, int], test: SwapTest) -> Work:
    """The units of work a finished swap test did: the completions, and the answers it generated (none when it
    found no alternative or had nothing to swap)."""
    tried = [(t.answer, t.swapped_context) for t in getattr(test, "trials", ())]
    if not tried and test.outcome in (FOLLOWED, KEPT, NEITHER_OUTCOME):
        tried = [(test.answer, test.swapped_context)]
    if not tried:
        return work(result, plan, answers=0)
    longest = max(max(1, prompt_tokens(handle, answer, template=1)) for answer, _ in tried)
    read = sum(prompt_tokens(handle, result.query, context) for _, context in tried)
    return work(result, plan, answers=len(tried), steps=longest, read=read)


def _estimate(handle: ModelHandle, result: DualPathResult, plan: tuple[int, int, int]) -> str:
    return estimate_text(handle, RUN_KIND, work(result, plan))


def stored(result: DualPathResult) -> SwapTest | None:
    """The swap test already run on ``result`` in this session, if any."""
    return session_lru(keys.SWAP_TESTS, MAX_TESTS).get(result_digest(result))


def _compare(test: SwapTest, head: Headline) -> str:
    """How the test stands to the headline: it carried it (and what the internals alone said), or it agrees or
    disagrees with the internals' verdict — never side by side unexplained."""
    if head.internals is not None:
        said = head.internals.get("title") or display(str(head.internals.get("verdict")))
        if head.internals.get("verdict") == head.verdict:
            return f" It decided the verdict above; the internals alone said the same ({said})."
        return (
            f" It decided the verdict above: the internals alone said {said}, but a swap the answer follows (or "
            "refuses) is what the model did, and the internals are only a prediction of it."
        )
    if not test.decided or head.verdict not in (READ, RECALLED):
        return ""
    same = test.outcome == head.verdict
    why = (
        ""
        if same or agreeing(head)
        else (
            " The context and the model's own answer do not agree on the span here, so the headline reads the text and "
            "the internals; the swap test is shown as a check, not as the verdict."
        )
    )
    return f" It {'agrees' if same else 'disagrees'} with the headline ({display(head.verdict)}).{why}"


def with_stored(handle: ModelHandle, result: DualPathResult) -> DualPathResult:
    """``result`` with its swap test joined (the test carries the headline, :func:`core.engine.swap_verdict.carry`)
    where the setting is on and context and memory agree on the span: run now (with its progress and estimate)
    unless this session holds it already; ``result`` itself where the setting is off or it does not apply."""
    auto = st.toggle(
        "Swap-test where context and memory agree",
        value=default_mode() != NEVER,
        key=keys.SWAP_AUTO,
        help="Where the context and the model's own answer name the same thing, no text can tell reading from "
        "recalling: the swap test runs as part of the run and, when it decides, carries the verdict (what the "
        "internals alone said is kept beside it). Off: the verdict is the internals' own prediction.",
    )
    if not auto or not wants_swap(result.head, AUTO):
        return result
    test = stored(result) or _run(
        handle, result, "Context and memory agree on the span: a swap test decides the verdict — "
    )
    return result if test is None else with_swap_test(result, test)


def _run(handle: ModelHandle, result: DualPathResult, intro: str = "") -> SwapTest | None:
    """Run the swap test now, under its estimate (``intro`` before it), kept for the session; measures the next
    estimate. ``None`` when it failed (the failure is shown)."""
    plan = planned(handle, result)
    line = st.caption(intro + _estimate(handle, result, plan))
    started = time.monotonic()
    test = run_cached(
        session_lru(keys.SWAP_TESTS, MAX_TESTS),
        result_digest(result),
        lambda progress: swap_test(handle, result, progress=progress),
        start="Completing the model's alternatives to whole words…",
        describe=lambda done, total, text: f"Answering again with the swapped context: {text}",
        what="swap test",
        log="swap test failed",
    )
    if test is not None:
        observe_run(handle, RUN_KIND, time.monotonic() - started, done_work(handle, result, plan, test))
        line.empty()
    return test


def draw(handle: ModelHandle, result: DualPathResult, head: Headline) -> SwapTest | None:
    """The swap test section: the button (with the estimate) or the stored outcome; returns the test."""
    st.subheader("Swap test: does the answer follow the context?")
    st.caption(EXPLAIN)
    test = stored(result)
    if test is None:
        clicked = st.button("Run the swap test", key=keys.SWAP_RUN, icon=":material/swap_horiz:")
        if not clicked:
            st.caption(_estimate(handle, result, planned(handle, result)))
            return None
        test = _run(handle, result)
        if test is None:
            return None
    words = escape_markdown(test.reason)
    if test.outcome == FOLLOWED:
        st.success(f"**Follows the swap — read from the context.** {words}.{_compare(test, head)}")
    elif test.outcome == KEPT:
        st.warning(f"**Keeps the original — recalled.** {words}.{_compare(test, head)}")
    elif test.outcome == NOT_APPLICABLE:
        st.info(f"**No swap test:** {words}.")
    else:
        st.info(f"**Undecided.** {words}.")
    if test.outcome != NOT_APPLICABLE:
        _draw_trials(test)
    return test


def _draw_trials(test: SwapTest) -> None:
    """Each alternative tried: where it came from, what the answer did, the swapped context and the answer."""
    trials = test.trials or (Trial(test.alternative, test.source, test.swapped_context, test.answer, test.outcome),)
    st.caption(f"{len(trials)} alternative{'s' if len(trials) != 1 else ''} of the span's kind · {test.seconds:.1f} s")
    for i, trial in enumerate(trials):
        outcome = {FOLLOWED: "the answer follows it", KEPT: "the answer keeps the original"}.get(
            trial.outcome, "the answer names neither"
        )
        with st.expander(f"“{escape_markdown(trial.alternative)}”: {outcome}", expanded=i == 0 and len(trials) == 1):
            st.caption(f"Alternative: {escape_markdown(trial.source)}")
            left, right = st.columns(2)
            with left:
                st.caption("Context with the swap")
                widgets.show_answer(st, trial.swapped_context)
            with right:
                st.caption("Answer with the swapped context")
                widgets.show_answer(st, trial.answer)
