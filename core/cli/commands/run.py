"""``python -m core run`` — one dual-path analysis of a query and a context.

Example::

    python -m core run --query "What is the capital of Veltria?" \\
        --context "The capital of Veltria is Marrowgate." --json

``--json`` prints the :class:`~core.engine.result.DualPathResult` JSON (its keys are fixed: see
``tests/unit/engine/test_run_json.py``); without it a short text summary is printed.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from core.cli.common import add_model_args, load_handle, settings_from_args, threshold_from_args
from core.engine import run_dual_path


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("run", help="analyze one query + context on both paths")
    p.add_argument("--query", required=True)
    p.add_argument("--context", required=True)
    p.add_argument("--json", action="store_true", help="print the whole result as one JSON object")
    add_model_args(p)
    p.set_defaults(func=_cmd_run)


def _cmd_run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    threshold, source = threshold_from_args(args)
    handle = load_handle(args)
    result = run_dual_path(handle, args.query, args.context, settings, threshold=threshold, threshold_source=source)
    if args.json:
        sys.stdout.write(result.to_json() + "\n")
        return 0
    lines = [
        f"model:       {result.model}",
        f"retrieval:   {result.retrieval.answer}",
        f"parametric:  {result.parametric.answer}",
        f"Z (T={result.score_window}): {result.repcs_score:.4f} nats   τ = {result.threshold}",
        f"verdict:     {result.verdict}  ({result.threshold_source})",
    ]
    lines += [f"warning:     {w}" for w in result.warnings]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
