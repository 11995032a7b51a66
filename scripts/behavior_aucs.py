"""Detector AUCs against behavior labels over the rows of one or more ``python -m core evaluate`` reports.

``evaluate`` adds a ``behavior`` section to its report by itself; this script recomputes it over the rows of
several reports taken together (e.g. a set scored in two runs in parallel), prints it and, with ``--out``,
writes it as JSON. Fitted detectors keep the out-of-fold scores each run gave them.

    python scripts/behavior_aucs.py out/behavior/eval_report_conflict.json out/behavior/eval_report_rest.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.evaluation.behavior import behavior_lines, behavior_report  # noqa: E402
from core.evaluation.scoring import resolve_detectors  # noqa: E402
from core.io import atomic_write_json  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", help="evaluate reports (JSON) of one model and one set of detectors")
    parser.add_argument("--out", default=None, help="write the behavior section as JSON here")
    parser.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples of the AUC CI")
    args = parser.parse_args()
    rows, names = [], None
    for path in args.reports:
        report = json.loads(Path(path).read_text(encoding="utf-8"))
        detectors = list(report["detectors"])
        if names is not None and detectors != names:
            raise SystemExit(f"{path}: other detectors than the first report's ({', '.join(names)})")
        names = detectors
        rows += report["rows"]
    behavior = behavior_report(rows, resolve_detectors(names), n_boot=args.bootstrap)
    if behavior is None:
        raise SystemExit("no row has answer_context / answer_memory: not a behavior-labeled set")
    print("\n".join(behavior_lines(behavior)))
    if args.out:
        atomic_write_json(args.out, behavior)
    return 0


if __name__ == "__main__":
    sys.exit(main())
