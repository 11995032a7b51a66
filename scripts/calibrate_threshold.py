"""Compute the bundled RePCS threshold τ for the embedded model (RePCS §III-K, Algorithm 1).

τ is the 5th percentile of Z over the clean, context-dependent prompts of ``assets/calibration/clean.csv``;
the memorized prompts of ``assets/calibration/memorized.csv`` give Δ = E[Z|clean] − E[Z|memorized] and the
achieved FNR; γ is the largest per-token |log P_rag − log P_para| over both sets. Writes
``assets/thresholds/embedded.json`` and the per-prompt scores ``assets/thresholds/embedded_scores.csv``.

Re-running reproduces the files (greedy decoding, fp32 on CPU; figures rounded to 6 decimals).

    python scripts/calibrate_threshold.py [--alpha 0.05] [--epsilon 0.05] [--window 64]
"""

from __future__ import annotations

import argparse
import csv
import logging
import sys

import numpy as np
from _common import read_csv
from tqdm import tqdm

from core.engine import DualPathSettings, run_dual_path
from core.io import asset_path
from core.methods.repcs import EMBEDDED_THRESHOLD, fit_threshold
from core.model.loading import load_model

CAL = asset_path("calibration")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--epsilon", type=float, default=0.05)
    parser.add_argument("--window", type=int, default=64)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    handle = load_model()
    settings = DualPathSettings(max_new_tokens=args.window, score_window=args.window)
    scored: dict[str, list[dict[str, object]]] = {}
    gamma = 0.0
    for name in ("clean", "memorized"):
        rows = read_csv(CAL / f"{name}.csv")
        out = []
        for i, row in enumerate(tqdm(rows, desc=f"{name} prompts", file=sys.stderr)):
            res = run_dual_path(handle, row["query"], row["context"], settings, free_parametric=False)
            gamma = max(gamma, res.max_abs_log_ratio)
            out.append(
                {
                    "set": name,
                    "row": i + 1,
                    "query": row["query"],
                    "z": round(res.repcs_score, 6),
                    "n_tokens": res.n_tokens,
                    "rag_answer": res.retrieval.answer,
                }
            )
        scored[name] = out
    z_clean = np.array([r["z"] for r in scored["clean"]])
    z_mem = np.array([r["z"] for r in scored["memorized"]])
    th = fit_threshold(
        z_clean,
        z_mem,
        round(gamma, 6),
        T=args.window,
        model=handle.info.name,
        alpha=args.alpha,
        epsilon=args.epsilon,
        source="scripts/calibrate_threshold.py on assets/calibration/",
    )
    for key in ("tau", "delta", "fpr", "fnr", "mean_z_clean", "mean_z_memorized"):
        value = getattr(th, key)
        if value is not None:
            setattr(th, key, round(float(value), 6))
    th.extra = {"template": settings.template, "max_new_tokens": settings.max_new_tokens}
    th.save(EMBEDDED_THRESHOLD)
    with (EMBEDDED_THRESHOLD.parent / "embedded_scores.csv").open("w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=["set", "row", "query", "z", "n_tokens", "rag_answer"])
        writer.writeheader()
        for name in ("clean", "memorized"):
            writer.writerows(scored[name])
    sys.stderr.write(th.to_json())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
