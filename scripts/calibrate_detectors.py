"""Compute the bundled per-detector thresholds of the agreement view (RePCS Algorithm 1 for every detector).

For every cheap detector scored in an evaluation of the calibration sets (``assets/calibration/clean.csv``
as *grounded*, ``memorized.csv`` as *memorized*), the threshold is the α-quantile of its score over the clean
prompts on the memorized side (:func:`core.detectors.agreement.alpha_threshold`), with the achieved FPR on the
clean prompts and FNR on the memorized ones. Writes ``assets/thresholds/detectors-<model slug>.json``, which
:func:`core.detectors.thresholds.bundled_calibration` reads.

Two steps (the first is the long one, ~10 min on a CPU; re-run both whenever a detector's maths changes)::

    python scripts/calibrate_detectors.py --csv out/calibration.csv          # writes the labeled CSV
    python -m core evaluate out/calibration.csv --out out/calibration_eval.json --detectors cheap \\
        --max-new-tokens 64 --sigmas '' --device cpu
    python scripts/calibrate_detectors.py --from-eval out/calibration_eval.json
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import numpy as np

from core.detectors.agreement import DEFAULT_ALPHA, THRESHOLD_DIR, alpha_threshold
from core.detectors.registry import MEMORIZED_HIGH, get
from core.io import asset_path, atomic_write_text, model_slug
from core.model.loading import EMBEDDED_NAME

CAL = asset_path("calibration")


def write_labeled_csv(path: Path) -> int:
    """Both calibration sets as one labeled CSV (clean → grounded, memorized → memorized)."""
    rows = []
    for name, label in (("clean", "grounded"), ("memorized", "memorized")):
        with (CAL / f"{name}.csv").open(newline="", encoding="utf-8") as fh:
            rows += [{"query": r["query"], "context": r["context"], "label": label} for r in csv.DictReader(fh)]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=["query", "context", "label"])
        writer.writeheader()
        writer.writerows(rows)
    return len(rows)


def thresholds_from_report(report: dict, alpha: float) -> dict:
    """The per-detector thresholds document from an evaluation report of the calibration sets."""
    rows = report["rows"]
    labels = np.asarray([r["label"] == "memorized" for r in rows])
    names = sorted({n for r in rows for n, v in (r.get("scores") or {}).items() if v is not None})
    detectors = {}
    for name in names:
        detector = get(name)
        if detector is None or (detector.needs_fit and detector.features is not None):
            continue
        values = np.asarray([np.nan if r["scores"].get(name) is None else r["scores"][name] for r in rows], float)
        clean, memorized = values[~labels], values[labels]
        clean, memorized = clean[np.isfinite(clean)], memorized[np.isfinite(memorized)]
        if clean.size == 0:
            continue
        tau = alpha_threshold(clean, detector.higher_means, alpha)
        high = detector.higher_means == MEMORIZED_HIGH
        flag_clean = clean > tau if high else clean < tau
        flag_memorized = memorized > tau if high else memorized < tau
        detectors[name] = {
            "threshold": round(tau, 6),
            "higher_means": detector.higher_means,
            "fpr": round(float(flag_clean.mean()), 6),
            "fnr": round(float((~flag_memorized).mean()), 6) if memorized.size else None,
            "n_clean": int(clean.size),
            "n_memorized": int(memorized.size),
        }
    return {
        "model": report["model"],
        "source": "scripts/calibrate_detectors.py on assets/calibration/ (clean = grounded, memorized)",
        "alpha": alpha,
        "settings": report["settings"],
        "n_clean": int((~labels).sum()),
        "n_memorized": int(labels.sum()),
        "detectors": detectors,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", type=Path, help="write the labeled calibration CSV here and stop")
    parser.add_argument("--from-eval", type=Path, help="the JSON of `python -m core evaluate` on that CSV")
    parser.add_argument("--alpha", type=float, default=DEFAULT_ALPHA)
    args = parser.parse_args()
    if args.csv:
        print(f"{write_labeled_csv(args.csv)} rows written to {args.csv}")
        return 0
    if not args.from_eval:
        parser.error("give --csv or --from-eval")
    report = json.loads(args.from_eval.read_text(encoding="utf-8"))
    document = thresholds_from_report(report, args.alpha)
    slug = model_slug(document["model"], "", embedded=document["model"] == EMBEDDED_NAME)
    out = THRESHOLD_DIR / f"detectors-{slug}.json"
    atomic_write_text(out, json.dumps(document, indent=1, sort_keys=True) + "\n")
    for name, entry in document["detectors"].items():
        print(f"{name:14s} τ = {entry['threshold']:10.4f}  FPR {entry['fpr']:.2f}  FNR {entry['fnr']}")
    print(f"written {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
