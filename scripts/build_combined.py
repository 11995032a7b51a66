"""Build the embedded model's combined detector: a stacked logistic regression over the cheap detectors' scores.

Training data: the RePCS calibration sets ``assets/calibration/clean.csv`` (87 grounded rows) and
``memorized.csv`` (59 memorized rows) — the same rows the bundled τ is set on (their Z are in
``assets/thresholds/embedded_scores.csv``) — and never the probe set ``assets/probes/probes.csv`` that the
README reports on. Each row runs through the dual-path engine at the bundled τ's settings (T = max new tokens =
64, template auto → chat, greedy, fp32 CPU) and every feature of :data:`core.detectors.combined.FEATURES` is
computed (one context forward, the CRM displacement's two forwards, RADAR's query forward, ReDeEP's and the
Lookback Lens' traced forwards).

Writes

* ``assets/combined/embedded-<template>.features.csv`` — the training table (set, row, label, query, every
  transformed feature), so the model can be refit without the language model (``--from-features``);
* ``assets/combined/embedded-<template>.json`` — the model (feature names, scaler mean/scale, coefficients,
  intercept, τ at α on the out-of-fold clean rows, achieved out-of-fold FPR/FNR/AUC, the training files with
  their sha256). No pickles.

Re-running reproduces the files (greedy decoding; CV folds and bootstrap seeded 42; one CPU thread by default).

``--add redeep`` adds ReDeEP's two features (``redeep_ecs``, ``redeep_pks``: the bundled ReDeEP choice's heads
and layers, ``assets/redeep/``) to the stored table from the per-row ECS/PKS that ``scripts/build_redeep.py``
cached in ``out/redeep/`` for the same calibration rows, then refits — no other feature is recomputed. ReDeEP's
heads and layers were chosen on these same rows, so the out-of-fold AUC stored with the model is optimistic for
those two features; the report sets were never used.

``--add lookback`` adds the Lookback Lens' two features (``lookback``: the bundled classifier's P(recalled),
``assets/lookback/``, fitted on the *behavior set's calibration split*, not on these rows; ``lookback_mean``:
the mean ratio, no fit) from the span features that ``scripts/score_redeep_sets.py assets/calibration/<set>.csv
--label <label> --parts lookback --out-dir out/redeep/calibration`` cached for the same rows, then refits. A
one-token answer has no ratio: its cell is ``nan`` and the fit uses the column's mean there (as the model does
when it scores such a row).

    python scripts/build_combined.py [--from-features | --add redeep|lookback] [--alpha 0.05] [--threads 1]
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import logging
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from _common import add_threads_arg, read_csv, set_threads

from core.detectors.combined import DEFAULT_ALPHA, DEFAULT_T, FEATURES, bundled_model_path, fit_combined
from core.io import REPO_ROOT, asset_path, atomic_write_text

CAL = asset_path("calibration")
SETS = (("clean", "grounded"), ("memorized", "memorized"))
TEMPLATE = "chat"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def features_path(template: str = TEMPLATE) -> Path:
    return bundled_model_path(template).with_suffix(".features.csv")


def calibration_rows() -> list[tuple[str, int, str, dict[str, str]]]:
    """``(set, row number, label, row)`` of every training row."""
    return [
        (name, i + 1, label, r)
        for name, label in SETS
        for i, r in enumerate(read_csv(CAL / f"{name}.csv", ["query", "context", "answer"]))
    ]


def extract(batch_size: int) -> tuple[list[dict[str, Any]], str, str, str]:
    """Score every calibration row with the embedded model; returns (table rows, model name, slug, template)."""
    from tqdm import tqdm

    from core.detectors.combined import raw_features
    from core.detectors.registry import DetectorInput
    from core.engine import DualPathSettings
    from core.engine.batch import score_batch
    from core.model.loading import load_model
    from core.model.prompts import resolve_template

    handle = load_model(device="cpu")
    settings = DualPathSettings(max_new_tokens=DEFAULT_T, score_window=DEFAULT_T, template="auto")
    rows = calibration_rows()
    table = []
    with tqdm(total=len(rows), desc="calibration rows", unit="row", file=sys.stderr) as bar:
        for start in range(0, len(rows), batch_size):
            chunk = rows[start : start + batch_size]
            results = score_batch(handle, [(r["query"], r["context"]) for _, _, _, r in chunk], settings)
            for (set_name, i, label, r), res in zip(chunk, results):
                x = raw_features(DetectorInput(handle, res, settings), tuple(FEATURES), DEFAULT_T)
                table.append({"set": set_name, "row": i, "label": label, "query": r["query"], **dict(zip(FEATURES, x))})
            bar.update(len(chunk))
    return table, handle.info.name, handle.slug, resolve_template(settings.template, handle.tokenizer).key


def write_table(table: list[dict[str, Any]], path: Path) -> None:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=["set", "row", "label", "query", *FEATURES], lineterminator="\n")
    writer.writeheader()
    for r in table:
        writer.writerow({k: (f"{v:.6f}" if isinstance(v, float) else v) for k, v in r.items()})
    atomic_write_text(path, buf.getvalue())


def _cached_rows(name: str) -> dict[tuple[str, int], dict[str, Any]]:
    """``out/redeep/calibration-chat.jsonl`` (``"redeep"``: build_redeep's per-row ECS/PKS) or the Lookback
    span features that ``scripts/score_redeep_sets.py --out-dir out/redeep/calibration`` stored (``"lookback"``),
    by (set, row)."""
    if name == "redeep":
        lines = (REPO_ROOT / "out" / "redeep" / f"calibration-{TEMPLATE}.jsonl").read_text(encoding="utf-8")
        return {(r["set"], int(r["row"])): r for r in map(json.loads, lines.splitlines())}
    from score_redeep_sets import load_rows

    cache = REPO_ROOT / "out" / "redeep" / "calibration"
    return {(s, i): r for s, _ in SETS for i, r in load_rows(cache / f"{s}.jsonl").items()}


def _columns(name: str) -> Callable[[dict[str, Any]], dict[str, float]]:
    """The new columns of one cached row: ReDeEP's two means over the bundled choice, or the bundled Lookback
    classifier's P(recalled) and the mean ratio (NaN for a one-token answer, which has no ratio)."""
    if name == "redeep":
        from core.methods.redeep import ReDeEPChoice
        from core.methods.redeep.choice import bundled_choice_path

        choice = ReDeEPChoice.load(bundled_choice_path(TEMPLATE))
        heads_l, heads_h = [h[0] for h in choice.heads], [h[1] for h in choice.heads]
        return lambda rec: {
            "redeep_ecs": float(np.asarray(rec["ecs"])[heads_l, heads_h].mean()),
            "redeep_pks": float(np.asarray(rec["pks"], dtype=np.float64)[choice.layers].mean()),
        }
    from core.methods.lookback import LookbackModel
    from core.methods.lookback import bundled_model_path as lookback_path

    classifier = LookbackModel.load(lookback_path(TEMPLATE))

    def lookback(rec: dict[str, Any]) -> dict[str, float]:
        if "lookback" not in rec:
            return {"lookback": math.nan, "lookback_mean": math.nan}
        x = np.asarray(rec["lookback"], dtype=np.float64)
        return {"lookback": classifier.probability(x), "lookback_mean": float(x.mean())}

    return lookback


def add_cached(path: Path, name: str) -> None:
    """Add the columns of ``name`` (``redeep`` or ``lookback``) to the stored table from the per-row cache."""
    cached, columns = _cached_rows(name), _columns(name)
    write_table([{**r, **columns(cached[(r["set"], int(r["row"]))])} for r in read_csv(path)], path)


def load_table(path: Path) -> tuple[np.ndarray, np.ndarray, list[dict[str, Any]]]:
    """The stored table as ``(X, y, rows)``; a missing value (one-token answer: no lookback ratio) becomes its
    column's mean over the other rows, as the model imputes it when scoring."""
    table = read_csv(path)
    X = np.array([[float(r[f]) for f in FEATURES] for r in table], dtype=np.float64)
    X = np.where(np.isnan(X), np.nanmean(X, axis=0), X)
    y = np.array([1 if r["label"] == "memorized" else 0 for r in table])
    return X, y, table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from-features", action="store_true", help="refit from the stored feature table")
    parser.add_argument("--add", choices=("redeep", "lookback"), help="add a lens' columns to the table, then refit")
    parser.add_argument("--alpha", type=float, default=DEFAULT_ALPHA, help="target FPR on clean rows (default 0.05)")
    parser.add_argument("--batch-size", type=int, default=8)
    add_threads_arg(parser)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    set_threads(args.threads)
    table_path = features_path()
    if args.add:
        add_cached(table_path, args.add)
    if args.from_features or args.add:
        from core.io import model_slug
        from core.model.loading import EMBEDDED_NAME

        model, slug, template = EMBEDDED_NAME, model_slug(EMBEDDED_NAME, "", embedded=True), TEMPLATE
    else:
        extracted, model, slug, template = extract(args.batch_size)
        table_path = features_path(template)
        write_table(extracted, table_path)
    # always fit on the stored (6-decimal) table, so a --from-features rebuild gives the same file
    X, y, table = load_table(table_path)
    trained_on = [
        {
            "path": str((CAL / f"{name}.csv").relative_to(REPO_ROOT)),
            "label": label,
            "rows": int(sum(1 for r in table if r["set"] == name)),
            "sha256": _sha256(CAL / f"{name}.csv"),
        }
        for name, label in SETS
    ]
    fitted, _oof = fit_combined(
        X, y, list(FEATURES), model=model, model_slug=slug, template=template, alpha=args.alpha, trained_on=trained_on
    )
    out = fitted.save(bundled_model_path(template))
    sys.stderr.write(f"wrote {out.relative_to(REPO_ROOT)} and {table_path.relative_to(REPO_ROOT)}\n")
    sys.stderr.write(
        f"out-of-fold AUC {fitted.auc_oof:.3f} [{fitted.auc_oof_ci[0]:.3f}, {fitted.auc_oof_ci[1]:.3f}]  "
        f"tau={fitted.tau:.4f} (alpha={fitted.alpha:g})  FPR={fitted.fpr_oof:.3f}  FNR={fitted.fnr_oof:.3f}  "
        f"n={len(y)} ({fitted.n_memorized} memorized / {fitted.n_grounded} grounded)\n"
    )
    for name, c in sorted(zip(fitted.features, fitted.coef), key=lambda t: -abs(t[1])):
        sys.stderr.write(f"  {name:14s} {c:+.3f}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
