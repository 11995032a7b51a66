"""``python -m core run`` — one dual-path analysis of a query and a context.

Example::

    python -m core run --query "What is the capital of Veltria?" \\
        --context "The capital of Veltria is Marrowgate." --json --all-detectors

``--json`` prints the :class:`~core.engine.result.DualPathResult` JSON (its keys are fixed: see
``tests/unit/engine/test_run_json.py``); without it a short text summary is printed. The top-level ``verdict``
is the two-axis headline (:func:`core.engine.axes.headline`: read / recalled / neither / inconclusive), with both
axes, their scores, thresholds and direction under ``axes``; RePCS' own Z-vs-τ verdict is ``repcs_verdict``.

``--all-detectors`` adds every detector that needs no extra generation, as the Dual Path page's agreement view
shows them (:func:`core.detectors.agreement.assess`), group by group (the question each answers,
:data:`core.detectors.registry.GROUPS`): under ``detectors``, ``name → {score, threshold, verdict, source, label,
higher_means, cost, error, note, group, direction, finding, says}`` (``verdict`` in :mod:`core.engine.verdict`'s
values, the side of the threshold; ``says`` / ``finding`` in the group's own words; ``direction`` "higher = …"),
under ``detector_groups`` each group's question, whether it feeds the headline, its own summary (what its detectors
measure and which disagree with the headline's axis and why; never a count), ``measures`` and
``disagree_with_headline``, the ``detectors_summary`` (every group's sentence), and under ``detectors_not_run`` the
costly ones with their estimated seconds and group. ``--detectors a,b`` scores the named detectors too, costly
ones included. Where context and memory agree on the answer span, the swap test runs
at it (:mod:`core.engine.swap_verdict`) and a decided test carries the verdict, the internals' own prediction kept
under ``axes.internals`` and ``internals_verdict``; ``--swap-test`` runs it on every run, ``--no-swap-test`` never.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from core.cli.common import add_model_args, run_from_args, settings_from_args, write_result
from core.detectors import resolve
from core.detectors.agreement import Agreement, assess, detector_input, judge, short_name
from core.detectors.registry import GROUPS
from core.detectors.wording import GROUP_WORDS, axis_line
from core.engine.axes import with_headline
from core.engine.swap_verdict import ALWAYS, NEVER, default_mode, swap_where_agreeing, wants_swap
from core.engine.verdict import display


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("run", help="analyze one query + context on both paths")
    p.add_argument("--query", required=True)
    p.add_argument("--context", required=True)
    p.add_argument("--json", action="store_true", help="print the whole result as one JSON object")
    p.add_argument(
        "--all-detectors",
        action="store_true",
        help="also score every detector that needs no extra generation (the agreement view)",
    )
    p.add_argument(
        "--detectors",
        default="",
        help="comma-separated detectors to score as well (costly ones included, e.g. selfcritique,sma)",
    )
    swap = p.add_mutually_exclusive_group()
    swap.add_argument(
        "--swap-test",
        dest="swap_mode",
        action="store_const",
        const=ALWAYS,
        help="run the swap test on every run (by default it runs where context and memory agree on the answer "
        "span, and a decided test carries the verdict): replace the answer span in the context by alternatives and "
        "answer again; the outcome goes under axes.swap_test",
    )
    swap.add_argument(
        "--no-swap-test",
        dest="swap_mode",
        action="store_const",
        const=NEVER,
        help="never run the swap test: the verdict is the internals' own prediction",
    )
    p.set_defaults(swap_mode=None)  # READ_OR_RECALL_SWAP, else auto (core.engine.swap_verdict.default_mode)
    add_model_args(p)
    p.set_defaults(func=_cmd_run)


def _agreement(handle: Any, result: Any, args: argparse.Namespace) -> Agreement | None:
    extra = [n.strip() for n in (args.detectors or "").split(",") if n.strip()]
    if not args.all_detectors and not extra:
        return None
    chosen = resolve(extra)  # unknown names fail before anything is scored
    inp = detector_input(handle, result)
    agreement = assess(handle, result, inp=inp, names=None if args.all_detectors else ())
    scored = {v.name for v in agreement.verdicts}
    for detector in chosen:
        if detector.name not in scored:
            agreement.verdicts.append(judge(detector, inp))
    return agreement


def _swap_progress(done: int, total: int, text: str = "") -> None:
    """The swap test's progress on stderr, one line rewritten in place ("swap test: alternative 1 of 3 · step 9 of
    64"), so a long context never runs silent."""
    sys.stderr.write(f"\rswap test: {text or f'{done} of {total}'}\033[K")
    sys.stderr.flush()


def _cmd_run(args: argparse.Namespace) -> int:
    resolve([n.strip() for n in (args.detectors or "").split(",") if n.strip()])  # before the model loads
    handle, result = run_from_args(args, settings_from_args(args), record=bool(args.all_detectors or args.detectors))
    result = with_headline(result)
    mode = args.swap_mode or default_mode()
    if wants_swap(result.head, mode):
        result = swap_where_agreeing(handle, result, mode, progress=_swap_progress)
        sys.stderr.write("\n")
    agreement = _agreement(handle, result, args)
    if args.json and agreement is not None:
        data = result.to_dict()
        data["detectors"] = agreement.to_dict()
        data["detectors_summary"] = agreement.summary
        data["detector_groups"] = agreement.groups()
        scored = set(data["detectors"])
        data["detectors_not_run"] = {
            c.name: {"label": c.label, "cost": c.cost, "estimate_s": c.estimate_s, "group": c.group}
            for c in agreement.costly
            if c.name not in scored
        }
        sys.stdout.write(json.dumps(data, ensure_ascii=False, allow_nan=False) + "\n")
        return 0
    details = [
        f"Z (T={result.score_window}): {result.repcs_score:.4f} nats   τ = {result.threshold}",
        f"verdict:     {result.axes['title']}",
        f"why:         {result.axes['reason']}",
        *_span_lines(result.axes),
        f"RePCS:       {display(result.repcs_verdict)}  ({result.threshold_source})",
        *(f"warning:     {w}" for w in result.warnings),
    ]
    if agreement is not None:
        details.extend(_group_lines(agreement))
    return write_result(result, args.json, details)


def _span_lines(axes: dict[str, Any]) -> list[str]:
    """The answer span the headline read and, when run, the swap test's outcome."""
    span = (axes.get("span") or {}).get("span")
    lines = [f"span:        “{span['text']}” — {span['why']}" if span else "span:        none (no content word)"]
    test = axes.get("swap_test")
    if test:
        lines.append(f"swap test:   {test['outcome']} — {test['reason']}")
    internals = axes.get("internals")
    if internals:  # the swap test carried the verdict: what the internals alone said
        lines.append(f"internals:   {internals['title']} (the internals alone, before the swap test)")
    return lines


def _group_lines(agreement: Agreement) -> list[str]:
    """The detectors as text, group by group under each group's question, every score with its direction."""
    lines = ["detectors (grouped by the question each answers; groups are never counted against each other):"]
    for group, rows, pending in agreement.by_group():
        lines.append(f"  {GROUP_WORDS[group].title} — {GROUPS[group]}")
        if group in agreement.axes:
            lines.append(f"    {axis_line(group, agreement.axes[group])}")
        for v in rows:
            score = "—" if v.score is None else f"{v.score:.4g}"
            threshold = "—" if v.threshold is None else f"{v.threshold:.4g}"
            lines.append(f"    {short_name(v.name):14s} {score:>10s}  τ {threshold:>10s}  {v.says}  ({v.direction})")
        lines.extend(f"    {short_name(c.name):14s} not run (needs extra generations)" for c in pending)
        lines.append(f"    summary: {agreement.group_summary(group)}")
    return lines
