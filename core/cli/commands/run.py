"""``python -m core run`` — one dual-path analysis of a query and a context.

Example::

    python -m core run --query "What is the capital of Veltria?" \\
        --context "The capital of Veltria is Marrowgate." --json --all-detectors

``--json`` prints the :class:`~core.engine.result.DualPathResult` JSON (its keys are fixed: see
``tests/unit/engine/test_run_json.py``); without it a short text summary is printed.

``--all-detectors`` adds every detector that needs no extra generation, as the Dual Path page's agreement view
shows them (:func:`core.detectors.agreement.assess`): under ``detectors``, ``name → {score, threshold, verdict,
source, label, higher_means, cost, error, note}`` (verdicts in :mod:`core.engine.verdict`'s values), the
one-line ``detectors_summary``, and under ``detectors_not_run`` the costly ones with their estimated seconds.
``--detectors a,b`` scores the named detectors too, costly ones included.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from core.cli.common import add_model_args, run_from_args, settings_from_args, write_result
from core.detectors import resolve
from core.detectors.agreement import Agreement, assess, detector_input, judge, short_name
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


def _cmd_run(args: argparse.Namespace) -> int:
    resolve([n.strip() for n in (args.detectors or "").split(",") if n.strip()])  # before the model loads
    handle, result = run_from_args(args, settings_from_args(args))
    agreement = _agreement(handle, result, args)
    if args.json and agreement is not None:
        data = result.to_dict()
        data["detectors"] = agreement.to_dict()
        data["detectors_summary"] = agreement.summary
        scored = set(data["detectors"])
        data["detectors_not_run"] = {
            c.name: {"label": c.label, "cost": c.cost, "estimate_s": c.estimate_s}
            for c in agreement.costly
            if c.name not in scored
        }
        sys.stdout.write(json.dumps(data, ensure_ascii=False, allow_nan=False) + "\n")
        return 0
    details = [
        f"Z (T={result.score_window}): {result.repcs_score:.4f} nats   τ = {result.threshold}",
        f"verdict:     {display(result.verdict)}  ({result.threshold_source})",
        *(f"warning:     {w}" for w in result.warnings),
    ]
    if agreement is not None:
        details.append("detectors:")
        for v in agreement.verdicts:
            score = "—" if v.score is None else f"{v.score:.4g}"
            threshold = "—" if v.threshold is None else f"{v.threshold:.4g}"
            details.append(f"  {short_name(v.name):14s} {score:>10s}  τ {threshold:>10s}  {display(v.verdict)}")
        details.append(f"summary:     {agreement.summary}")
    return write_result(result, args.json, details)
