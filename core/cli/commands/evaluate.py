"""``python -m core evaluate`` — score a labeled CSV with the detectors and write the metrics as JSON.

Example::

    python -m core evaluate assets/probes/probes.csv --out result.json --detectors cheap --sample 100

The output is :func:`core.evaluation.report.build_report`'s document (the Evaluate page's JSON download); one
line per detector (AUC with its 95% CI, FPR@95%TPR, Precision@10) is printed to stderr. Nothing is written
unless the whole run succeeds.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from core.cli.common import add_model_args, load_handle, row_progress, settings_from_args, threshold_from_args
from core.detectors import available
from core.engine import DEFAULT_BATCH_SIZE
from core.evaluation import evaluate_rows, read_labeled_csv, stratified_sample
from core.io import atomic_write_json


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("evaluate", help="score a labeled CSV (query,context,label) and write metrics JSON")
    p.add_argument("data", help="CSV with columns query, context, label (memorized|grounded)")
    p.add_argument("--out", required=True, help="where to write the result JSON")
    p.add_argument(
        "--detectors",
        default="repcs",
        help="comma-separated detector names (min_k_<k> / min_kpp_<k> for any k in 1..100), 'all', or "
        "'cheap' (every detector that needs no extra generation) (default: repcs)",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=DEFAULT_BATCH_SIZE,
        help=f"rows generated together in one padded batch (default {DEFAULT_BATCH_SIZE})",
    )
    p.add_argument(
        "--sigmas",
        default="0,0.02,0.05,0.1",
        help="logit-noise σ values for the RePCS Table IV robustness table ('' to skip)",
    )
    p.add_argument(
        "--sample",
        type=int,
        default=None,
        metavar="N",
        help="score a stratified sample of N rows (label proportions kept, seed 42) instead of all",
    )
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for the AUC 95%% CI (default 1000)")
    add_model_args(p)
    p.set_defaults(func=_cmd_evaluate, max_new_tokens=32)


def detector_names(choice: str) -> list[str]:
    """``--detectors``: ``all``, ``cheap`` (no extra generation) or comma-separated names (checked later)."""
    registry = available()
    if choice == "all":
        return list(registry)
    if choice == "cheap":
        return [n for n, d in registry.items() if d.cost in ("free", "forward")]
    return [d.strip() for d in choice.split(",") if d.strip()]


def _sigmas(text: str) -> list[float]:
    try:
        return [float(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ValueError(f"--sigmas must be comma-separated numbers, got {text!r}") from None


def _num(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def _cmd_evaluate(args: argparse.Namespace) -> int:
    rows = read_labeled_csv(args.data)
    if args.sample is not None:
        if args.sample < 1:
            raise ValueError("--sample must be at least 1")
        rows = stratified_sample(rows, args.sample)
    names = detector_names(args.detectors)
    sigmas = _sigmas(args.sigmas)
    if args.batch_size < 1 or args.bootstrap < 1:
        raise ValueError("--batch-size and --bootstrap must be at least 1")
    settings = settings_from_args(args)
    threshold, _ = threshold_from_args(args)
    handle = load_handle(args)
    with row_progress(len(rows)) as progress:
        report = evaluate_rows(
            handle,
            rows,
            settings,
            threshold=threshold,
            detectors=names,
            batch_size=args.batch_size,
            noise_sigmas=sigmas,
            n_boot=args.bootstrap,
            progress=progress,
        )
    atomic_write_json(args.out, report)
    for name, m in report["detectors"].items():
        ci = m.get("auc_ci") or [None, None]
        line = (
            f"{name:16s} AUC={_num(m['auc'], '.3f')} [{_num(ci[0], '.3f')}, {_num(ci[1], '.3f')}]"
            f"  FPR@95%TPR={_num(m['fpr_at_95tpr'], '.3f')}  P@10={_num(m['precision_at_10'], '.2f')}  n={m['n']}"
        )
        if m.get("note"):
            line += f"  ({m['note']})"
        sys.stderr.write(line + "\n")
    sys.stderr.write(f"n={report['n']} → {args.out}\n")
    return 0
