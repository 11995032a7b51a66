"""A case-control sample of a behavior-labeled set for measuring detectors against behavior: every decisive row of
the rare behavior and a seeded sample of the common one (an AUC does not depend on the class ratio), optionally
without the rows of another set (e.g. the bundled ``assets/behavior/behavior.csv``, whose calibration split fitted
the headline).

    python scripts/case_control.py out/nq/nq_full.csv out/nq/sample.csv --kind nq_swap --per-rare 2 \\
        [--exclude assets/behavior/behavior.csv]
"""

from __future__ import annotations

import argparse
import csv
import random
import sys
from pathlib import Path

DECISIVE = ("read", "recalled")


def case_control(
    rows: list[dict[str, str]], per_rare: float, seed: int = 0, exclude: set[tuple[str, str]] | None = None
) -> list[dict[str, str]]:
    """Every decisive row of the rarer behavior and ``per_rare`` times as many of the other, drawn with ``seed``;
    rows whose ``(query, context)`` is in ``exclude`` are left out first. Rare rows first, then the sample."""
    exclude = exclude or set()
    kept = [r for r in rows if r.get("behavior") in DECISIVE and (r["query"], r["context"]) not in exclude]
    by = {b: [r for r in kept if r["behavior"] == b] for b in DECISIVE}
    rare, common = sorted(DECISIVE, key=lambda b: (len(by[b]), b))
    sample = list(by[common])
    random.Random(seed).shuffle(sample)
    return by[rare] + sample[: round(per_rare * len(by[rare]))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--kind", default="", help="keep only rows of this kind (e.g. nq_swap)")
    ap.add_argument("--per-rare", type=float, default=2.0, help="common-behavior rows per rare one (default 2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--exclude", type=Path, default=None, help="leave out the rows of this CSV")
    args = ap.parse_args()
    with args.data.open(encoding="utf-8", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if not args.kind or r.get("kind") == args.kind]
    exclude: set[tuple[str, str]] = set()
    if args.exclude is not None:
        with args.exclude.open(encoding="utf-8", newline="") as fh:
            exclude = {(r["query"], r["context"]) for r in csv.DictReader(fh)}
    sample = case_control(rows, args.per_rare, args.seed, exclude)
    if not sample:
        print("no decisive rows", file=sys.stderr)
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(sample[0]))
        writer.writeheader()
        writer.writerows(sample)
    counts = {b: sum(r["behavior"] == b for r in sample) for b in DECISIVE}
    print(f"{len(sample)} rows ({counts['read']} read, {counts['recalled']} recalled) → {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
