"""Build a model's Lookback Lens classifier: a logistic regression over the per-head mean lookback ratios.

Training data: the **calibration split** of the behavior-labeled conflict set ``assets/behavior/behavior.csv``
(``split == "calibration"``; label = ``behavior``: ``recalled`` → 1, ``read`` → 0) — never its report split,
which the docs report on, and none of ``assets/sets/``. Each row runs through the dual-path engine (greedy,
``--max-new-tokens`` 64 = ``evaluate``'s default, template auto → chat, fp32 CPU); then one teacher-forced
forward of the retrieval prompt + answer per row (batched) gives the lookback-ratio map, whose per-head means
over the answer (the first answer token skipped: it has no earlier answer token) are the features. Rows whose
answer has a single token have no features and are left out (counted).

Writes

* ``assets/lookback/embedded-<template>.features.csv`` (embedded model; else next to the cached model) — the
  training table (row, behavior, kind, every feature), so ``--from-features`` refits without the model;
* ``assets/lookback/embedded-<template>.json`` for the embedded model, or the user cache
  (``<cache>/lookback/<slug>/<template>.json``) for ``--model`` — coefficients, scaler mean/scale, τ, the
  out-of-fold figures and the training file's sha256. No pickles.

Re-running reproduces the files (greedy decoding; CV folds and bootstrap seeded 42; one CPU thread by default).

    python scripts/build_lookback.py [--model FOLDER_OR_ID] [--from-features] [--limit N] [--threads 1]

``--score REPORT.json …`` instead scores the rows of ``python -m core evaluate`` reports that ran ``lookback_cv``
(whose per-row features are the same span features) with the embedded model's bundled classifier — exactly what
the ``lookback`` detector computes — and prints every detector's AUC with its 95 % CI against the set's labels
(and against behavior for a behavior-labeled set); ``--out`` writes the rescored reports' summaries as JSON.
This is how docs/lookback.md's figures were computed without a second pass over the rows.
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

from core.io import REPO_ROOT, asset_path, atomic_write_text
from core.methods.lookback import bundled_model_path, cache_model_path, fit_lookback

DATA = asset_path("behavior", "behavior.csv")
SPLIT = "calibration"
LABELS = {"recalled": 1, "read": 0}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def calibration_rows(limit: int | None = None) -> list[dict[str, str]]:
    """The calibration split's rows with a read/recalled behavior (the first ``limit`` of them)."""
    rows = [
        {**r, "_row": str(i + 1)}
        for i, r in enumerate(read_csv(DATA))
        if r["split"] == SPLIT and r["behavior"] in LABELS
    ]
    return rows[:limit] if limit else rows


def extract(handle: Any, rows: list[dict[str, str]], max_new_tokens: int, batch_size: int) -> tuple[list, int, str]:
    """Score the rows and trace their lookback maps; returns (table rows, rows left out, resolved template)."""
    from tqdm import tqdm

    from core.engine import DualPathSettings
    from core.engine.batch import score_rows
    from core.methods.lookback import lookback_maps, span_features
    from core.model.prompts import resolve_template

    settings = DualPathSettings(max_new_tokens=max_new_tokens, score_window=max_new_tokens, template="auto")
    table: list[dict[str, Any]] = []
    skipped = 0
    L, H = handle.info.n_layers, handle.info.n_heads
    with tqdm(total=len(rows), desc="calibration rows", unit="row", file=sys.stderr) as bar:
        for start in range(0, len(rows), batch_size):
            chunk = rows[start : start + batch_size]
            results = score_rows(handle, [(r["query"], r["context"]) for r in chunk], settings, batch_size=batch_size)
            usable = [(r, res) for r, res in zip(chunk, results) if res is not None and res.n_tokens >= 2]
            skipped += len(chunk) - len(usable)
            maps = lookback_maps(handle, [res for _, res in usable], batch_size=batch_size)
            for (r, _), m in zip(usable, maps):
                x = span_features(m.lr)
                table.append(
                    {
                        "row": r["_row"],
                        "behavior": r["behavior"],
                        "kind": r["kind"],
                        **{f"L{i // H}H{i % H}": float(v) for i, v in enumerate(x)},
                    }
                )
            bar.update(len(chunk))
    if any(len(t) != 3 + L * H for t in table):
        raise RuntimeError("a feature row of the wrong length")
    return table, skipped, resolve_template(settings.template, handle.tokenizer).key


def write_table(table: list[dict[str, Any]], path: Path) -> None:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(table[0]), lineterminator="\n")
    writer.writeheader()
    for r in table:
        writer.writerow({k: (f"{v:.6f}" if isinstance(v, float) else v) for k, v in r.items()})
    atomic_write_text(path, buf.getvalue())


def _auc(metrics: dict[str, Any]) -> str:
    auc, ci = metrics.get("auc"), metrics.get("auc_ci")
    if auc is None:
        return "—"
    return f"{auc:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")


def score_reports(paths: list[str], out: str | None, template: str = "chat") -> int:
    """Add ``lookback`` scores (bundled classifier over the stored ``lookback_cv`` features) to evaluate reports,
    recompute their metrics and print them."""
    import json

    from core.evaluation.behavior import behavior_report
    from core.evaluation.report import summarize
    from core.evaluation.scoring import resolve_detectors
    from core.io import atomic_write_json
    from core.methods.lookback import LookbackModel

    model = LookbackModel.load(bundled_model_path(template))
    summaries = {}
    for path in paths:
        report = json.loads(Path(path).read_text(encoding="utf-8"))
        names = [n for n in report["detectors"] if n != "lookback"] + ["lookback"]
        rows = []
        for r in report["rows"]:
            x = r.get("features", {}).get("lookback_cv")
            scores = {k: v for k, v in r["scores"].items() if k != "lookback"}
            scores["lookback"] = None if x is None else model.probability(np.asarray(x))
            rows.append({**r, "scores": scores})
        detectors = resolve_detectors(names)
        summary, scored = summarize(rows, detectors)
        behavior = behavior_report(scored, detectors)
        summaries[path] = {"n": len(rows), "detectors": summary["detectors"], "behavior": behavior}
        sys.stderr.write(f"{path}: {len(rows)} rows\n")
        for name, m in summary["detectors"].items():
            sys.stderr.write(f"  {name:14s} AUC {_auc(m)}  errors {m.get('errors', 0)}\n")
        for key, sub in (behavior or {}).get("subsets", {}).items():
            parts = [
                f"{name} {_auc(d)}" for name, d in sub["detectors"].items() if name.startswith(("lookback", "repcs"))
            ]
            sys.stderr.write(f"  behavior {key} ({sub.get('n_read')} read / {sub.get('n_recalled')} recalled): ")
            sys.stderr.write("; ".join(parts) + "\n")
    if out:
        atomic_write_json(out, summaries)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="hub id or local folder (default: the embedded SmolLM2)")
    parser.add_argument("--from-features", action="store_true", help="refit from the stored feature table")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--alpha", type=float, default=0.05, help="target FPR on read rows (default 0.05)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--limit", type=int, default=None, help="use only the first N calibration rows")
    parser.add_argument("--score", nargs="+", metavar="REPORT", help="score evaluate reports' stored features")
    parser.add_argument("--out", default=None, help="with --score: write the summaries here")
    add_threads_arg(parser)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.score:
        return score_reports(args.score, args.out)
    set_threads(args.threads)
    from core.model.loading import load_model

    handle = load_model(args.model, device="cpu") if args.model else load_model(device="cpu")
    from core.model.prompts import resolve_template

    template = resolve_template("auto", handle.tokenizer).key
    out_path = bundled_model_path(template) if handle.info.is_embedded else cache_model_path(handle, template)
    table_path = out_path.with_suffix(".features.csv")
    skipped = 0
    rows = calibration_rows(args.limit)
    if not args.from_features:
        extracted, skipped, template = extract(handle, rows, args.max_new_tokens, args.batch_size)
        write_table(extracted, table_path)
    table = read_csv(table_path)
    names = [k for k in table[0] if k not in ("row", "behavior", "kind")]
    X = np.array([[float(r[f]) for f in names] for r in table], dtype=np.float64)
    y = np.array([LABELS[r["behavior"]] for r in table])
    trained_on = [
        {
            "path": str(DATA.relative_to(REPO_ROOT)),
            "split": SPLIT,
            "rows": len(table),
            "left_out_one_token_answers": skipped,
            "sha256": _sha256(DATA),
        }
    ]
    fitted, _oof = fit_lookback(
        X,
        y,
        n_layers=handle.info.n_layers,
        n_heads=handle.info.n_heads,
        model=handle.info.name,
        model_slug=handle.slug,
        template=template,
        alpha=args.alpha,
        max_new_tokens=args.max_new_tokens,
        trained_on=trained_on,
    )
    out = fitted.save(out_path)
    sys.stderr.write(f"wrote {out} and {table_path}\n")
    sys.stderr.write(
        f"out-of-fold AUC {fitted.auc_oof:.3f} [{fitted.auc_oof_ci[0]:.3f}, {fitted.auc_oof_ci[1]:.3f}]  "
        f"tau={fitted.tau:.4f} (alpha={fitted.alpha:g})  FPR={fitted.fpr_oof:.3f}  FNR={fitted.fnr_oof:.3f}  "
        f"n={len(y)} ({fitted.n_memorized} recalled / {fitted.n_grounded} read), {skipped} one-token answers left out\n"
    )
    weights = fitted.head_weights()
    for i in np.argsort(-np.abs(weights).ravel())[:10]:
        sys.stderr.write(f"  layer {i // fitted.n_heads:2d} head {i % fitted.n_heads}: {weights.ravel()[i]:+.3f}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
