"""``python -m core calibrate-model`` — calibrate every per-model artifact of a model in one step.

Examples::

    python -m core calibrate-model --model gemma3-270m                 # the default: 240 rows within 55 minutes
    python -m core calibrate-model --model path/model.gguf --budget 30m  # a quick one: at most 30 minutes
    python -m core calibrate-model --model owner/name --budget 80 --out out/cal   # 80 rows, checkpoints in out/cal
    python -m core calibrate-model --rows traffic.csv      # your own (query, context) rows, labeled by swap tests

From the bundled behavior rows it builds the model's own behavior-labeled rows (knownness checked with the model),
scores them with the app's default settings, runs the swap test on rows whose context agrees with memory, fits τ and
τ(L), the headline's axes calibration, the per-detector thresholds, the CRM basis, the Lookback Lens classifier,
ReDeEP's heads and layers, the combined detector and RADAR's assets, writes them where the app, the CLI and the audit
service find them (model + revision + template), and prints the calibration card: held-out figures on the report
rows, never fitted on (:mod:`core.evaluation.calibrate`). A killed or interrupted run continues where it
stopped when run again (``--restart`` starts over).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from core.cli.common import DTYPES, load_handle, parse_device
from core.evaluation.calibrate import DEFAULT_MINUTES, DEFAULT_ROWS, Budget, calibrate_model
from core.evaluation.model_card import card_text
from core.io import check_output_path


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "calibrate-model",
        help="calibrate every per-model artifact (τ, the headline's axes, detector thresholds, CRM basis, Lookback, "
        "ReDeEP, combined, RADAR) on the model's own behavior-labeled rows; print the calibration card",
    )
    p.add_argument(
        "--model",
        default=None,
        help="hub id, local folder, GGUF file or packaged model name such as gemma3-270m (default: the embedded model)",
    )
    p.add_argument("--revision", default=None, help="hub revision (branch, tag or commit)")
    p.add_argument("--device", type=parse_device, default=None, help="cpu, cuda or cuda:N")
    p.add_argument("--dtype", choices=list(DTYPES), default=None, help="weights' dtype")
    p.add_argument(
        "--budget",
        default=None,
        help=f"rows to score (e.g. 120) or minutes (e.g. 30m); default {DEFAULT_ROWS} rows within "
        f"{DEFAULT_MINUTES:g} minutes. Fewer rows: a quicker "
        "calibration with wider intervals (the card says how much wider)",
    )
    p.add_argument("--out", default=None, metavar="DIR", help="keep the run's checkpoints and a copy of the card here")
    p.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="rows per padded batch (default: as many as keep the batch's logits under 768 MB, at most 8)",
    )
    p.add_argument(
        "--rows",
        default=None,
        metavar="CSV",
        help="calibrate on your own rows instead of the bundled ones: a CSV with a 'query' and a 'context' column "
        "(your retrieval traffic, unlabeled: each row is labeled by its swap test, half kept for the held-out "
        "figures, split by question), or validation rows in the bundled file's columns",
    )
    p.add_argument("--restart", action="store_true", help="drop the checkpoints of an earlier run and start over")
    p.add_argument("--json", action="store_true", help="print the card as JSON instead of text")
    p.set_defaults(func=_cmd)


def _progress(done: int, total: int, text: str = "") -> None:
    sys.stderr.write(f"\r{text[:150]:150s}")
    sys.stderr.flush()
    if done >= total:
        sys.stderr.write("\n")


def _cmd(args: argparse.Namespace) -> int:
    budget = Budget.parse(args.budget)  # an empty, blank or out-of-range budget is refused here
    if args.batch_size is not None and args.batch_size < 1:
        raise ValueError(f"--batch-size must be at least 1, got {args.batch_size}")
    if args.out is not None:
        if not args.out.strip():
            raise ValueError("--out is empty: give the folder for the run's checkpoints and the card, or leave it out")
        check_output_path(f"{args.out}/card.json", "--out folder")
    handle = load_handle(args)
    try:
        card = calibrate_model(
            handle,
            budget=budget,
            out=args.out,
            progress=_progress,
            batch_size=args.batch_size,
            restart=args.restart,
            rows_path=args.rows,
        )
    except KeyboardInterrupt as exc:
        kept = " ".join(getattr(exc, "__notes__", [])) or "what was scored is kept; run the command again to continue"
        sys.stderr.write(f"\ninterrupted: {kept}\n")
        return 130
    sys.stdout.write(json.dumps(card, indent=2) + "\n" if args.json else card_text(card))
    return 0
