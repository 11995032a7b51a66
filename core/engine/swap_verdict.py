"""One verdict where context and memory agree: a decided swap test carries the headline, the internals' own
prediction kept beside it.

Where the answer's span is in the context *and* in the model's own no-context answer, no text can tell reading from
recalling, and the internals alone are weakest there (docs/validity.md). The swap test is behavior: with the span
replaced in the context by another answer of its kind, does the answer follow? So a run whose context agrees with
memory is swap-tested as part of the run (:func:`wants_swap`, mode :data:`AUTO`; :data:`NEVER` skips it,
:data:`ALWAYS` tests every calibrated run), and a decided test carries the headline (:func:`carry`): *Read from the
context* when the answer followed the swap, *Recalled from memory* when it kept the original. What the internals
alone said stays on the headline (:attr:`~core.engine.headline_record.Headline.internals`, :func:`own`), and the
reason says which the page believes and why when the two disagree.

A swap the answer refuses is weak evidence when the alternative was one the model does not propose itself (every
deciding alternative *type-matched*, an original number shifted): the answer may have kept the original because
the swapped context was implausible, not because the model recalled it. Such a test does not carry the headline,
and the reason says so (:func:`implausible`).
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from core.engine.headline_record import AGREES, ALSO_KNOWN, Headline
from core.engine.swap_words import FOLLOWED, KEPT
from core.engine.verdict import READ, RECALLED, UNCALIBRATED, display

if TYPE_CHECKING:
    from core.engine.result import DualPathResult
    from core.engine.swap import SwapTest
    from core.model.handle import ModelHandle
    from core.model.progress import Progress

AUTO, ALWAYS, NEVER = "auto", "always", "never"
MODES = (AUTO, ALWAYS, NEVER)
"""When a run is swap-tested: where context and memory agree on the span (the default), every calibrated run, or
never."""
TYPE_MATCHED_SOURCE = "type-matched"
"""The start of :data:`core.engine.swap.TYPE_MATCHED` (an alternative the model did not propose)."""


MODE_ENV = "READ_OR_RECALL_SWAP"
"""The environment variable that sets the default mode of the app, ``run`` and ``lab.run`` (``auto`` when unset; a
deployment that cannot spend the generation sets ``never``)."""


def default_mode() -> str:
    """The default of :data:`MODES`: :data:`MODE_ENV` when set (``ValueError`` naming the modes otherwise), else
    :data:`AUTO`."""
    value = os.environ.get(MODE_ENV, "").strip().lower()
    if value and value not in MODES:
        raise ValueError(f"{MODE_ENV} must be one of {', '.join(MODES)}, got {value!r}")
    return value or AUTO


def check_mode(mode: str) -> str:
    """``mode`` when it is one of :data:`MODES` (``ValueError`` naming them otherwise)."""
    if mode not in MODES:
        raise ValueError(f"swap must be one of {', '.join(MODES)}, got {mode!r}")
    return mode


def agreeing(head: Headline) -> bool:
    """Context and memory agree on the headline's span: the context holds it and so does the no-context answer."""
    span = head.span or {}
    return bool(span.get("span")) and span.get("in_context") is True and span.get("in_parametric") is True


def wants_swap(head: Headline, mode: str = AUTO) -> bool:
    """Whether a run with this headline is swap-tested under ``mode``: never for a model without its calibration
    (the swap test is run at the calibrated span) or a headline without a span; :data:`AUTO` where context and
    memory agree (:func:`agreeing`)."""
    check_mode(mode)
    if mode == NEVER or head.verdict == UNCALIBRATED or not (head.span or {}).get("span"):
        return False
    return mode == ALWAYS or agreeing(head)


def own(head: Headline) -> dict[str, Any]:
    """What the internals alone said: the kept prediction where a swap test carried the headline, else the
    headline itself (``verdict``, ``title``, ``reason``)."""
    if head.internals is not None:
        return dict(head.internals)
    return {"verdict": head.verdict, "title": head.title, "reason": head.reason}


def implausible(test: SwapTest) -> bool:
    """The answer kept the original and every alternative that decided was type-matched (an original number shifted:
    not one the model proposed), so the swap may have been refused as implausible rather than recalled over."""
    deciding = [t for t in test.trials if t.outcome in (FOLLOWED, KEPT)]
    if test.outcome != KEPT:
        return False
    sources = [t.source for t in deciding] or [test.source]
    return all(s.startswith(TYPE_MATCHED_SOURCE) for s in sources)


def _because(test: SwapTest, internals: str) -> str:
    agree = internals == test.outcome
    told = test.reason[:1].lower() + test.reason[1:]
    said = f"the internals alone say {display(internals).lower()}"
    if agree:
        return f"{told}; {said} too."
    if internals in (READ, RECALLED):
        why = "a swap the answer follows is behavior" if test.outcome == FOLLOWED else "the answer kept its own word"
        return f"{told}; {said}, but the page goes by the swap test: {why}, the internals are a prediction of it."
    return f"{told}; {said} ({internals}): the swap test decides it."


def carry(head: Headline, test: SwapTest | None) -> Headline:
    """The headline a swap test carries: where context and memory agree and the test decided (and was not
    :func:`implausible`), its outcome is the verdict — *Read from the context, which the model also says without
    it* / *Recalled from memory, the context agrees* — with the internals' own prediction in ``internals``; otherwise
    ``head`` itself (a note in the reason when the swap was implausible)."""
    if test is None or head.verdict == UNCALIBRATED or head.internals is not None or not agreeing(head):
        return head
    if not test.decided:
        return head
    if implausible(test):
        note = (
            " A swap test kept the original, but every alternative it tried was an original number shifted (not one "
            "the model proposes), so the swap may have been implausible: the internals' verdict stands."
        )
        return replace(head, reason=head.reason + note)
    verdict = READ if test.outcome == FOLLOWED else RECALLED
    internals = own(head)
    return replace(
        head,
        verdict=verdict,
        qualifier=ALSO_KNOWN if verdict == READ else AGREES,
        reason=f"Decided by a swap test (context and memory agree, so the text cannot tell): "
        f"{_because(test, internals['verdict'])}",
        title_words=None,
        internals=internals,
    )


def disagrees(head: Headline) -> bool:
    """A swap test carried the headline and the internals alone said otherwise."""
    return head.internals is not None and head.internals.get("verdict") != head.verdict


def internals_verdict(result: DualPathResult) -> str:
    """The internals' own prediction for a result (no swap test): ``run --json``'s ``internals_verdict``."""
    return str(own(result.head)["verdict"])


def swap_where_agreeing(
    handle: ModelHandle, result: DualPathResult, mode: str = AUTO, *, progress: Progress | None = None
) -> DualPathResult:
    """``result`` with its swap test joined and carrying the headline (:func:`carry`) where :func:`wants_swap`
    says so under ``mode``; ``result`` itself otherwise (no model call)."""
    from core.engine.swap import swap_test, with_swap_test

    if not wants_swap(result.head, mode):
        return result
    return with_swap_test(result, swap_test(handle, result, progress=progress))
