"""``python -m core run`` — one dual-path analysis of a query and a context.

Example::

    python -m core run --query "What is the capital of Veltria?" \\
        --context "The capital of Veltria is Marrowgate." --json

``--json`` prints the :class:`~core.engine.result.DualPathResult` JSON (its keys are fixed: see
``tests/unit/engine/test_run_json.py``); without it a short text summary is printed.
"""

from __future__ import annotations

import argparse
from typing import Any

from core.cli.common import add_model_args, run_from_args, settings_from_args, write_result


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("run", help="analyze one query + context on both paths")
    p.add_argument("--query", required=True)
    p.add_argument("--context", required=True)
    p.add_argument("--json", action="store_true", help="print the whole result as one JSON object")
    add_model_args(p)
    p.set_defaults(func=_cmd_run)


def _cmd_run(args: argparse.Namespace) -> int:
    _, result = run_from_args(args, settings_from_args(args))
    details = [
        f"Z (T={result.score_window}): {result.repcs_score:.4f} nats   τ = {result.threshold}",
        f"verdict:     {result.verdict}  ({result.threshold_source})",
        *(f"warning:     {w}" for w in result.warnings),
    ]
    return write_result(result, args.json, details)
