"""``python -m core evaluate`` — score a labeled CSV with the detectors and write the metrics as JSON.

Example::

    python -m core evaluate assets/probes/probes.csv --out result.json --detectors cheap --sample 100

The output is :func:`core.evaluation.report.build_report`'s document (the Evaluate page's JSON download). Each row
carries the same headline as ``run --json`` (``verdict``, ``axes`` with both axes and the answer span), RePCS' own
verdict (``repcs_verdict``), the two baselines that read less (``text_only``, ``axis1``) and, with ``--swap-test``,
the swap test (``swap_test``). One line per detector (AUC with its 95% CI, FPR@95%TPR, Precision@10) is printed to
stderr. Nothing is written unless the whole run succeeds. Every argument, the data file and the output location are
checked before the model is loaded; should the output still fail to write at the end, the report goes to a file in the
temporary folder and the message says where.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from typing import Any

from core.cli.common import (
    add_model_args,
    load_handle,
    parse_bootstrap,
    row_progress,
    settings_from_args,
    threshold_from_args,
)
from core.detectors import available, resolve
from core.engine import DEFAULT_BATCH_SIZE
from core.engine.tau_resolution import tau_in_force
from core.engine.threshold import Threshold
from core.evaluation import LABELS, evaluate_rows, read_labeled_csv, resolve_detectors, stratified_sample
from core.evaluation.behavior import behavior_lines, behavior_report, select_split
from core.evaluation.evaluate import EvaluateOptions
from core.io import atomic_write_json, check_output_path
from core.model.loading import EMBEDDED_NAME
from core.scale.options import add_ray_args, check_ray_args, evaluate_from_args

DEFAULT_MAX_NEW_TOKENS = 64
"""Max new tokens (and T) when no τ is available to take T from."""


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
    p.add_argument(
        "--split",
        default=None,
        metavar="NAME",
        help="score only the rows whose 'split' column is NAME (behavior sets: calibration or report)",
    )
    p.add_argument(
        "--bootstrap",
        type=parse_bootstrap,
        default=1000,
        help="bootstrap resamples for the AUC 95%% CI (10 to 10,000; default 1000)",
    )
    p.add_argument(
        "--swap-test",
        action="store_true",
        help="also run the swap test on every row (one more generation per row): each row's swap_test (where "
        "context and memory agree a decided test carries the row's verdict; internals_verdict keeps the internals' "
        "own), and the internals' verdict against it on rows whose context agrees with memory",
    )
    add_model_args(p)
    add_ray_args(p)
    # T and max new tokens default to the T of the τ in force (64 for the bundled τ): see default_window()
    p.set_defaults(func=_cmd_evaluate, max_new_tokens=None)


def detector_names(choice: str) -> list[str]:
    """``--detectors``: ``all``, ``cheap`` (no extra generation) or comma-separated names (checked later)."""
    registry = available()
    if choice == "all":
        return list(registry)
    if choice == "cheap":
        return [n for n, d in registry.items() if d.cost in ("free", "forward")]
    return [d.strip() for d in choice.split(",") if d.strip()]


def default_window(args: argparse.Namespace, threshold: Threshold | None) -> tuple[int | None, list[str]]:
    """Fill ``--max-new-tokens`` from the τ in force and say when T differs from the τ's T.

    The τ is ``--threshold-file``'s, else the one the run will use for the model
    (:func:`core.engine.threshold.tau_in_force`; the bundled τ has T = 64). Without ``--max-new-tokens`` and
    ``--window`` both default to that T, so Z, τ and the reported FPR/FNR are on one scale. An explicit T that
    differs gives a warning (printed loudly and stored in the report's ``warnings``).

    Returns:
        ``(T of the τ or None, warnings)``; ``args.max_new_tokens`` is set when it was left out.
    """
    threshold, _ = tau_in_force(EMBEDDED_NAME if args.model is None else args.model, threshold)
    tau_T = None if threshold is None else int(threshold.T)
    if args.max_new_tokens is None:
        args.max_new_tokens = tau_T if tau_T is not None else DEFAULT_MAX_NEW_TOKENS
    window = args.max_new_tokens if args.window is None else args.window
    warnings = []
    if tau_T is not None and window != tau_T:
        warnings.append(
            f"T = {window} answer tokens differs from the T = {tau_T} the τ was calibrated with: Z and τ are on "
            "different scales, so the verdicts, and the τ's FPR/FNR reported for this run, mix scales. Leave out "
            f"--window/--max-new-tokens (T = {tau_T}) or recalibrate τ at T = {window}."
        )
    return tau_T, warnings


def _sigmas(text: str) -> list[float]:
    try:
        values = [float(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ValueError(f"--sigmas must be comma-separated numbers, got {text!r}") from None
    if any(not math.isfinite(v) or v < 0 for v in values):
        raise ValueError(f"--sigmas must be finite numbers >= 0, got {text!r}")
    return values


def _num(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def _write_report(path: str, report: dict[str, Any]) -> str:
    """Write the report to ``path``; if that fails now (checked at the start), to the temporary folder."""
    try:
        atomic_write_json(path, report)
        return path
    except OSError as exc:
        fallback = os.path.join(tempfile.gettempdir(), f"read_or_recall_evaluate_{os.getpid()}.json")
        atomic_write_json(fallback, report)
        sys.stderr.write(f"warning: could not write {path} ({exc.strerror or exc}); the report is in {fallback}\n")
        return fallback


def _cmd_evaluate(args: argparse.Namespace) -> int:
    # everything is checked before the model is loaded: a run can take hours
    check_output_path(args.out, "--out file")
    if args.sample is not None and args.sample < 1:
        raise ValueError(f"--sample must be at least 1, got {args.sample}")
    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be at least 1, got {args.batch_size}")
    check_ray_args(args)
    names = detector_names(args.detectors)
    resolve(names)  # unknown names fail here, not after scoring
    sigmas = _sigmas(args.sigmas)
    threshold, _ = threshold_from_args(args)
    tau_T, t_warnings = default_window(args, threshold)
    settings = settings_from_args(args)
    for warning in t_warnings:
        sys.stderr.write(f"WARNING: {warning}\n")
    rows = read_labeled_csv(args.data)
    for note in getattr(rows, "notes", ()):
        sys.stderr.write(f"note: {note}\n")
    if args.split is not None:
        rows = select_split(rows, args.split, args.data)
    if args.sample is not None:
        if args.sample > len(rows):
            sys.stderr.write(f"note: --sample {args.sample} is more than the file's {len(rows)} rows; scoring all.\n")
        rows = stratified_sample(rows, args.sample)
    missing = [label for label in LABELS if label not in {r.label for r in rows}]
    if missing:
        raise ValueError(f"Evaluation needs rows of both labels; {args.data} has no {' or '.join(missing)} row.")
    options = EvaluateOptions(
        threshold=threshold,
        detectors=names,
        batch_size=args.batch_size,
        noise_sigmas=sigmas,
        n_boot=args.bootstrap,
        swap_test=args.swap_test,
    )  # the same scoring, here or on Ray
    if args.ray is not None:  # the scoring on Ray actors (core.scale); metrics computed here as below
        report = evaluate_from_args(args, rows, settings, options)
    else:
        handle = load_handle(args)
        with row_progress(len(rows)) as progress:
            report = evaluate_rows(handle, rows, settings, options, progress=progress)
    report["dataset"] = os.path.splitext(os.path.basename(args.data))[0]  # the set's name: the file's stem
    behavior = behavior_report(report["rows"], resolve_detectors(names), n_boot=args.bootstrap)
    if behavior is not None:  # a behavior-labeled set: AUCs against the labels of this run's own answers
        report["behavior"] = behavior
    if args.split is not None:
        report["split"] = args.split
    report["tau_T"] = tau_T
    if t_warnings:
        report["warnings"] = [*report.get("warnings", []), *t_warnings]
    written = _write_report(args.out, report)
    for name, m in report["detectors"].items():
        ci = m.get("auc_ci") or [None, None]
        line = (
            f"{name:16s} AUC={_num(m['auc'], '.3f')} [{_num(ci[0], '.3f')}, {_num(ci[1], '.3f')}]"
            f"  FPR@95%TPR={_num(m['fpr_at_95tpr'], '.3f')}  P@10={_num(m['precision_at_10'], '.2f')}  n={m['n']}"
        )
        if m.get("note"):
            line += f"  ({m['note']})"
        sys.stderr.write(line + "\n")
    for line in behavior_lines(behavior):
        sys.stderr.write(line + "\n")
    sys.stderr.write(f"set={report['dataset']} n={report['n']} → {written}\n")
    for warning in t_warnings:
        sys.stderr.write(f"WARNING: {warning}\n")
    return 0
