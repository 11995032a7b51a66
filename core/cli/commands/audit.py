"""``python -m core audit verify|calibrate`` — check the audit log's hash chain; calibrate the audit per deployment.

``audit verify`` exits 0 when the chain is intact, 1 when it was tampered with (a record changed, deleted or
re-ordered; the head moved), 2 when there is no database to check (or it cannot be read now, e.g. locked) or
``--expect-head`` is malformed, and **3 when the file is damaged** — SQLite's own ``quick_check`` rejects it, or
a page cannot be read — so a damaged file is never reported as "ok", nor as a missing one.

Examples::

    # walk the chain; exit 1 and name the first changed, deleted or re-ordered record when it is broken
    python -m core audit verify --db audit.sqlite3
    python -m core audit verify --db audit.sqlite3 --expect-head 3f9c…   # a head hash published earlier

    # μ_ℓ, σ_ℓ, the PC1 basis and the flag's threshold from your own clean rows (CSV with query,context)
    python -m core audit calibrate clean.csv --out my-domain.npz --holdout 0.2
    python -m core serve --calibration my-domain.npz
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from core.audit.calibration import calibrate, default_calibration_path, read_clean_csv
from core.audit.chain import DAMAGED
from core.audit.store import DB_ENV, default_db_path, verify_chain
from core.cli.common import add_model_args, load_handle
from core.io import check_output_path

EXIT_OK, EXIT_BROKEN, EXIT_DAMAGED = 0, 1, 3
"""``audit verify``'s exit codes (2, no database or a usage error, comes from ``core.cli``)."""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("audit", help="the audit log's chain check, and the audit's calibration per deployment")
    sub = p.add_subparsers(dest="audit_command", required=True)

    v = sub.add_parser(
        "verify",
        help="walk the hash chain; exit code 1 when a record was changed/deleted/re-ordered, 3 when the file is "
        "damaged",
    )
    v.add_argument("--db", default=None, help=f"audit database (default ${DB_ENV}, else {default_db_path()})")
    v.add_argument(
        "--expect-head", default=None, help="a head hash published earlier (GET /stats) that must be on the chain"
    )
    v.add_argument("--json", action="store_true", help="print the report as JSON")
    v.set_defaults(func=_cmd_verify)

    c = sub.add_parser("calibrate", help="μ_ℓ, σ_ℓ, PC1 and the anomaly threshold from a clean CSV (query,context)")
    c.add_argument("data", help="CSV with columns query,context (a label column keeps only the grounded rows)")
    c.add_argument(
        "--out", default=None, help="where to write the calibration (default: the per-model cache file serve finds)"
    )
    c.add_argument("--alpha", type=float, default=0.05, help="target false-alarm rate of the flag (default 0.05)")
    c.add_argument(
        "--holdout", type=float, default=0.2, help="share of rows held out to check the flag rate (default 0.2)"
    )
    c.add_argument("--seed", type=int, default=42)
    c.add_argument("--batch-size", type=int, default=16)
    add_model_args(c)
    c.set_defaults(func=_cmd_calibrate)


def _cmd_verify(args: argparse.Namespace) -> int:
    db = args.db or str(default_db_path())
    report = verify_chain(db, expect_head=args.expect_head)
    if args.json:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2) + "\n")
    elif report.ok:
        sys.stdout.write(f"ok: {report.message} head seq {report.head_seq}, hash {report.head_hash}\n")
    elif report.problem == DAMAGED:
        sys.stdout.write(f"DAMAGED: {report.message}\n")
    else:
        sys.stdout.write(f"BROKEN ({report.problem}): {report.message}\n")
    if report.ok:
        return EXIT_OK
    return EXIT_DAMAGED if report.problem == DAMAGED else EXIT_BROKEN


def _cmd_calibrate(args: argparse.Namespace) -> int:
    if args.out is not None:  # before any model work: a folder or a pipe is refused now, not after the passes
        check_output_path(args.out, "--out file")
    rows, note, digest = read_clean_csv(args.data)
    handle = load_handle(args)
    calib, report = calibrate(
        handle,
        rows,
        template=args.template,
        alpha=args.alpha,
        holdout=args.holdout,
        seed=args.seed,
        batch_size=args.batch_size,
        source=f"clean rows of {Path(args.data).name} ({note})",
        meta={"data": Path(args.data).name, "data_sha256": digest},
    )
    out = Path(args.out) if args.out else default_calibration_path(handle, calib.template)
    calib.save(check_output_path(out, "calibration file"))
    lines = [
        f"calibration {calib.calibration_id} for {handle.info.name} (template {calib.template!r}) written to {out}",
        f"  rows: {report['n_rows']} fitted" + (f", {report.get('held_out_rows', 0)} held out" if args.holdout else ""),
        (
            f"  audited layers: {report['audited_layers']}; flag threshold s_α = {calib.score_threshold:.4f} "
            f"(α = {args.alpha})"
        ),
        f"  flag rate on the fitted rows: {report['in_sample_flag_rate']:.3f}",
    ]
    if "held_out_flag_rate" in report:
        lines.append(f"  flag rate on held-out clean rows: {report['held_out_flag_rate']:.3f} (target ≈ {args.alpha})")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
