"""Build the embedded model's combined detector: a stacked logistic regression over the cheap detectors' scores.

Training data: the RePCS calibration sets ``assets/calibration/clean.csv`` (87 grounded rows) and
``memorized.csv`` (59 memorized rows) — the same rows the bundled τ is set on (their Z are in
``assets/thresholds/embedded_scores.csv``) — and never the probe set ``assets/probes/probes.csv`` that the
README reports on. Each row runs through the dual-path engine at the bundled τ's settings (T = max new tokens =
64, template auto → chat, greedy, fp32 CPU) and every feature of :data:`core.detectors.combined.FEATURES` is
computed (one context forward, the CRM displacement's two forwards, RADAR's query forward).

Writes

* ``assets/combined/embedded-<template>.features.csv`` — the training table (set, row, label, query, every
  transformed feature), so the model can be refit without the language model (``--from-features``);
* ``assets/combined/embedded-<template>.json`` — the model (feature names, scaler mean/scale, coefficients,
  intercept, τ at α on the out-of-fold clean rows, achieved out-of-fold FPR/FNR/AUC, the training files with
  their sha256). No pickles.

Re-running reproduces the files (greedy decoding; CV folds and bootstrap seeded 42; one CPU thread by default).

``--add-redeep`` adds ReDeEP's two features (``redeep_ecs``, ``redeep_pks``: the bundled ReDeEP choice's heads
and layers, ``assets/redeep/``) to the stored table from the per-row ECS/PKS that ``scripts/build_redeep.py``
cached in ``out/redeep/`` for the same calibration rows, then refits — no other feature is recomputed. ReDeEP's
heads and layers were chosen on these same rows, so the out-of-fold AUC stored with the model is optimistic for
those two features; the report sets were never used.

    python scripts/build_combined.py [--from-features | --add-redeep] [--alpha 0.05] [--threads 1] [--batch-size 8]
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import logging
import sys
from pathlib import Path
from typing import Any

import numpy as np
from _common import add_threads_arg, read_csv, set_threads

from core.detectors.combined import CV_NAME, DEFAULT_ALPHA, DEFAULT_T, FEATURES, bundled_model_path, fit_combined
from core.io import REPO_ROOT, asset_path, atomic_write_text

CAL = asset_path("calibration")
SETS = (("clean", "grounded"), ("memorized", "memorized"))
TEMPLATE = "chat"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def features_path(template: str = TEMPLATE) -> Path:
    return bundled_model_path(template).with_suffix(".features.csv")


def extract(batch_size: int) -> tuple[list[dict[str, Any]], str, str, str]:
    """Score every calibration row with the embedded model; returns (table rows, model name, slug, template)."""
    from tqdm import tqdm

    from core.detectors import get
    from core.engine import DualPathSettings
    from core.evaluation.data import LabeledRow
    from core.evaluation.scoring import score_records
    from core.model.loading import load_model

    handle = load_model(device="cpu")
    settings = DualPathSettings(max_new_tokens=DEFAULT_T, score_window=DEFAULT_T, template="auto")
    detector = get(CV_NAME)
    rows: list[LabeledRow] = []
    sets: list[str] = []
    for name, label in SETS:
        for i, r in enumerate(read_csv(CAL / f"{name}.csv", ["query", "context", "answer"])):
            rows.append(LabeledRow(row=i + 1, query=r["query"], context=r["context"], label=label))
            sets.append(name)
    table = []
    template = ""
    with tqdm(total=len(rows), desc="calibration rows", unit="row", file=sys.stderr) as bar:
        for start in range(0, len(rows), batch_size):
            chunk = rows[start : start + batch_size]
            records = score_records(handle, chunk, settings, {CV_NAME: detector})
            for rec, row, set_name in zip(records, chunk, sets[start : start + batch_size]):
                if CV_NAME not in rec.get("features", {}):
                    raise RuntimeError(f"{set_name} row {row.row}: {rec.get('errors', {}).get(CV_NAME)}")
                x = rec["features"][CV_NAME]
                table.append(
                    {"set": set_name, "row": row.row, "label": row.label, "query": row.query, **dict(zip(FEATURES, x))}
                )
            bar.update(len(chunk))
    from core.model.prompts import resolve_template

    template = resolve_template(settings.template, handle.tokenizer).key
    return table, handle.info.name, handle.slug, template


def write_table(table: list[dict[str, Any]], path: Path) -> None:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=["set", "row", "label", "query", *FEATURES], lineterminator="\n")
    writer.writeheader()
    for r in table:
        writer.writerow({k: (f"{v:.6f}" if isinstance(v, float) else v) for k, v in r.items()})
    atomic_write_text(path, buf.getvalue())


def add_redeep(path: Path) -> None:
    """Add ``redeep_ecs`` / ``redeep_pks`` to the stored table from ``out/redeep/calibration-chat.jsonl``."""
    import json

    from core.methods.redeep import ReDeEPChoice
    from core.methods.redeep.choice import bundled_choice_path

    choice = ReDeEPChoice.load(bundled_choice_path(TEMPLATE))
    cached = REPO_ROOT / "out" / "redeep" / f"calibration-{TEMPLATE}.jsonl"
    recs = {}
    for line in cached.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        recs[(rec["set"], int(rec["row"]))] = rec
    heads_l, heads_h = [h[0] for h in choice.heads], [h[1] for h in choice.heads]
    table: list[dict[str, Any]] = []
    for r in read_csv(path):
        rec = recs[(r["set"], int(r["row"]))]
        ecs, pks = np.asarray(rec["ecs"]), np.asarray(rec["pks"])
        r["redeep_ecs"] = float(ecs[heads_l, heads_h].mean())
        r["redeep_pks"] = float(pks[choice.layers].mean())
        table.append(r)
    write_table(table, path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from-features", action="store_true", help="refit from the stored feature table")
    parser.add_argument("--add-redeep", action="store_true", help="add ReDeEP's features to the table, then refit")
    parser.add_argument("--alpha", type=float, default=DEFAULT_ALPHA, help="target FPR on clean rows (default 0.05)")
    parser.add_argument("--batch-size", type=int, default=8)
    add_threads_arg(parser)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    set_threads(args.threads)
    table_path = features_path()
    if args.add_redeep:
        add_redeep(table_path)
    if args.from_features or args.add_redeep:
        from core.io import model_slug
        from core.model.loading import EMBEDDED_NAME

        model, slug, template = EMBEDDED_NAME, model_slug(EMBEDDED_NAME, "", embedded=True), TEMPLATE
    else:
        extracted, model, slug, template = extract(args.batch_size)
        table_path = features_path(template)
        write_table(extracted, table_path)
    # always fit on the stored (6-decimal) table, so a --from-features rebuild gives the same file
    table = [{**r, **{f: float(r[f]) for f in FEATURES}} for r in read_csv(table_path)]
    X = np.array([[float(r[f]) for f in FEATURES] for r in table], dtype=np.float64)
    y = np.array([1 if r["label"] == "memorized" else 0 for r in table])
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
        sys.stderr.write(f"  {name:12s} {c:+.3f}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
