"""Compute the bundled RePCS threshold for the embedded model (RePCS §III-K, Algorithm 1, plus τ(L)).

* τ (the paper's constant, the "RePCS (paper)" setting) is the 5th percentile of Z over the clean,
  context-dependent prompts of ``assets/calibration/clean.csv``;
* τ(L) (the length-aware default, :func:`core.methods.repcs.fit_length_tau`) is the 5%-quantile regression of
  ln Z on ln L over the same prompts, L = min(T, answer length) scored tokens, with a 90% percentile
  bootstrap band (200 refits, seed 0);
* the memorized prompts of ``assets/calibration/memorized.csv`` give Δ = E[Z|clean] − E[Z|memorized] and the
  achieved FNR; γ is the largest per-token |log P_rag − log P_para| over both sets.

Writes ``assets/thresholds/embedded.json`` and the per-prompt scores ``assets/thresholds/embedded_scores.csv``
(set, row, query, Z, answer tokens, γ of the row, answer). ``--from-scores`` refits from that CSV without
running the model (γ from its column, or from the current ``embedded.json`` for a CSV written before the
column existed). Re-running reproduces the files (greedy decoding, fp32 on CPU; figures rounded to 6
decimals).

``--widen`` (issue 23 part 4) fits τ(L) — not the constant τ, which stays the paper's quantile over
``clean.csv`` — on the clean rows together with ``assets/calibration/widened_clean.csv``: the behavior set's
calibration rows the model read from the context (conflict, invented and project rows, answers of 1–16 tokens;
written by the earlier headline pipeline, kept as data), so that τ(L) covers short answers instead of calling them
inconclusive.

    python scripts/calibrate_threshold.py [--alpha 0.05] [--epsilon 0.05] [--window 64] [--from-scores] [--widen]
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import json
import logging
import sys
from typing import Any

import numpy as np
from _common import read_csv
from tqdm import tqdm

from core.engine.threshold import EMBEDDED_THRESHOLD
from core.io import asset_path, atomic_write_text
from core.methods.repcs import fit_threshold

CAL = asset_path("calibration")
SCORES = EMBEDDED_THRESHOLD.parent / "embedded_scores.csv"
COLUMNS = ["set", "row", "query", "z", "n_tokens", "max_abs_log_ratio", "rag_answer"]
SETS = ("clean", "memorized")


def score_with_model(window: int) -> tuple[dict[str, list[dict[str, Any]]], str, str]:
    """Run every calibration prompt through the embedded model; returns (rows per set, model name, template)."""
    from core.engine import DualPathSettings, run_dual_path
    from core.model.loading import load_model

    handle = load_model()
    settings = DualPathSettings(max_new_tokens=window, score_window=window)
    scored: dict[str, list[dict[str, Any]]] = {}
    for name in SETS:
        rows = read_csv(CAL / f"{name}.csv")
        out = []
        for i, row in enumerate(tqdm(rows, desc=f"{name} prompts", file=sys.stderr)):
            res = run_dual_path(handle, row["query"], row["context"], settings, free_parametric=False)
            out.append(
                {
                    "set": name,
                    "row": i + 1,
                    "query": row["query"],
                    "z": round(res.repcs_score, 6),
                    "n_tokens": res.n_tokens,
                    "max_abs_log_ratio": round(res.max_abs_log_ratio, 6),
                    "rag_answer": res.retrieval.answer,
                }
            )
        scored[name] = out
    return scored, handle.info.name, settings.template


def read_scores() -> dict[str, list[dict[str, Any]]]:
    """The rows of ``embedded_scores.csv`` by set (γ of a row is ``None`` in a CSV without that column)."""
    scored: dict[str, list[dict[str, Any]]] = {name: [] for name in SETS}
    for row in read_csv(SCORES):
        gamma = row.get("max_abs_log_ratio")
        scored[row["set"]].append(
            {
                **row,
                "row": int(row["row"]),
                "z": float(row["z"]),
                "n_tokens": int(row["n_tokens"]),
                "max_abs_log_ratio": float(gamma) if gamma not in (None, "") else None,
            }
        )
    return scored


def _scores(args: argparse.Namespace) -> tuple[dict[str, list[dict[str, Any]]], str, str, float, int]:
    """``(scored rows per set, model, template, γ, T)``: from ``embedded_scores.csv`` with ``--from-scores`` (γ
    and T as the current ``embedded.json`` says where the CSV lacks them), else scored with the model."""
    if not args.from_scores:
        scored, model, template = score_with_model(args.window)
        return scored, model, template, max(r["max_abs_log_ratio"] for name in SETS for r in scored[name]), args.window
    scored = read_scores()
    old = json.loads(EMBEDDED_THRESHOLD.read_text(encoding="utf-8"))
    gammas = [r["max_abs_log_ratio"] for name in SETS for r in scored[name]]
    gamma = max(gammas) if all(g is not None for g in gammas) else float(old["gamma"])
    window = int(old["T"])
    if window != args.window:
        raise SystemExit(f"the scores were computed with T = {window}, not --window {args.window}")
    return scored, old["model"], (old.get("extra") or {}).get("template", "auto"), gamma, window


def _write_scores(scored: dict[str, list[dict[str, Any]]]) -> None:
    """Write the per-prompt scores CSV (a CSV without γ per row is left as it is)."""
    rows = [{k: r.get(k) for k in COLUMNS} for name in SETS for r in scored[name]]
    if all(r["max_abs_log_ratio"] is not None for r in rows):
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
        atomic_write_text(SCORES, buffer.getvalue())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--epsilon", type=float, default=0.05)
    parser.add_argument("--window", type=int, default=64)
    parser.add_argument(
        "--from-scores", action="store_true", help="refit from embedded_scores.csv without running the model"
    )
    parser.add_argument("--widen", action="store_true", help="fit τ(L) on clean.csv + widened_clean.csv")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    scored, model, template, gamma, window = _scores(args)
    z_clean = np.array([r["z"] for r in scored["clean"]])
    z_mem = np.array([r["z"] for r in scored["memorized"]])
    n_clean = np.array([min(window, r["n_tokens"]) for r in scored["clean"]])
    th = fit_threshold(
        z_clean,
        z_mem,
        round(gamma, 6),
        T=window,
        model=model,
        alpha=args.alpha,
        epsilon=args.epsilon,
        source="scripts/calibrate_threshold.py on assets/calibration/",
        n_scored_clean=n_clean,
    )
    for key in ("tau", "delta", "fpr", "fnr", "mean_z_clean", "mean_z_memorized"):
        value = getattr(th, key)
        if value is not None:
            setattr(th, key, round(float(value), 6))
    if args.widen:
        from core.methods.repcs_length import fit_length_tau

        extra = read_csv(CAL / "widened_clean.csv")
        z_all = np.concatenate([z_clean, [float(r["z"]) for r in extra]])
        n_all = np.concatenate([n_clean, [int(r["n_scored"]) for r in extra]])
        th.length_tau = fit_length_tau(z_all, n_all, args.alpha)
        th.source += " (τ(L) with assets/calibration/widened_clean.csv)"
    lt = th.length_tau
    n_mem = np.array([min(window, r["n_tokens"]) for r in scored["memorized"]])
    th.length_tau = dataclasses.replace(
        lt,
        intercept=round(lt.intercept, 6),
        slope=round(lt.slope, 6),
        boot_intercept=tuple(round(v, 6) for v in lt.boot_intercept),
        boot_slope=tuple(round(v, 6) for v in lt.boot_slope),
    )
    tau_clean = np.array([th.length_tau.tau(n) for n in n_clean])
    tau_mem = np.array([th.length_tau.tau(n) for n in n_mem])
    th.extra = {
        "template": template,
        "max_new_tokens": window,
        "fpr_length_aware": round(float((z_clean < tau_clean).mean()), 6),
        "fnr_length_aware": round(float((z_mem >= tau_mem).mean()), 6),
        "rates": "in-sample on assets/calibration/ (fpr/fnr: constant τ; *_length_aware: τ(L))",
    }
    if args.widen:
        th.extra["n_clean_length_aware"] = int(th.length_tau.n)
    th.save(EMBEDDED_THRESHOLD)
    _write_scores(scored)
    sys.stderr.write(th.to_json())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
