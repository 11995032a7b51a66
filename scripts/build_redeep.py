"""Build the embedded model's ReDeEP choice: copying heads, knowledge layers and α, β, from calibration data.

Calibration data: the RePCS calibration sets ``assets/calibration/clean.csv`` (87 rows, label *read*: invented
facts the model can only read) and ``memorized.csv`` (59 rows, label *recalled*) — the rows the combined
detector is fitted on, never a set the README reports on. Each row runs through the dual-path engine (T = max
new tokens = 64, template auto → chat, greedy, fp32 CPU) and one ReDeEP traced forward of the retrieval path
(:func:`core.methods.redeep.redeep_trace`); the row keeps its mean ECS per head and mean PKS per layer over the
answer tokens. Rows are cached in ``out/redeep/`` (resumable).

Writes

* ``assets/redeep/embedded-<template>.calibration.npz`` — the table (ECS ``(n, L, H)``, PKS ``(n, L)``, labels);
* ``assets/redeep/embedded-<template>.json`` — the choice: heads (Pearson), layers (Pearson), α, β, the
  correlations, the OV copying scores of every head, the out-of-fold AUC (selection inside the folds).

A user's own heads and layers, refit on the stored table (α, β), written to a file that
``$READ_OR_RECALL_REDEEP_CHOICE`` can name:

    python scripts/build_redeep.py [--threads 1] [--batch-size 8] [--n-heads 10] [--n-layers 4]
    python scripts/build_redeep.py --from-table --heads 12.3,14.5 --layers 20,21 --out my-choice.json
    python scripts/build_redeep.py --from-table --head-method ov --out ov-choice.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
from pathlib import Path

import numpy as np
from _common import add_threads_arg, read_csv, set_threads

from core.io import REPO_ROOT, asset_path

CAL = asset_path("calibration")
SETS = (("clean", 0), ("memorized", 1))
TEMPLATE = "chat"
T = 64
CACHE = REPO_ROOT / "out" / "redeep"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def calibration_rows() -> list[tuple[str, int, str, str, int]]:
    """``(set, row, query, context, label)`` of every calibration row (label 1 = recalled)."""
    out = []
    for name, label in SETS:
        for i, r in enumerate(read_csv(CAL / f"{name}.csv", ["query", "context", "answer"])):
            out.append((name, i + 1, r["query"], r["context"], label))
    return out


def extract(handle, rows, batch_size: int, cache: Path) -> list[dict]:
    """Every row's mean ECS / PKS (cached one JSON line per row in ``cache``)."""
    from tqdm import tqdm

    from core.engine import DualPathSettings
    from core.engine.batch import score_batch
    from core.methods.redeep import redeep_trace, row_means

    done: dict[tuple[str, int], dict] = {}
    if cache.is_file():
        for line in cache.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            done[(rec["set"], rec["row"])] = rec
    settings = DualPathSettings(max_new_tokens=T, score_window=T, template="auto")
    todo = [r for r in rows if (r[0], r[1]) not in done]
    cache.parent.mkdir(parents=True, exist_ok=True)
    with tqdm(total=len(rows), initial=len(rows) - len(todo), desc="redeep calibration", file=sys.stderr) as bar:
        for start in range(0, len(todo), batch_size):
            chunk = todo[start : start + batch_size]
            results = score_batch(handle, [(q, c) for _, _, q, c, _ in chunk], settings)
            with cache.open("a", encoding="utf-8") as fh:
                for (name, row, _, _, label), res in zip(chunk, results):
                    ecs, pks = row_means(redeep_trace(handle, res))
                    rec = {"set": name, "row": row, "label": label, "ecs": ecs.tolist(), "pks": pks.tolist()}
                    rec["kl_z"] = float(res.repcs_score)
                    done[(name, row)] = rec
                    fh.write(json.dumps(rec) + "\n")
            bar.update(len(chunk))
    return [done[(r[0], r[1])] for r in rows]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from-table", action="store_true", help="refit from the stored calibration table")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--n-heads", type=int, default=None, help="copying heads to choose (default 10)")
    parser.add_argument("--n-layers", type=int, default=None, help="knowledge layers to choose (default 4)")
    parser.add_argument("--head-method", choices=("pearson", "ov"), default="pearson")
    parser.add_argument("--heads", default=None, help="your own copying heads, layer.head comma-separated")
    parser.add_argument("--layers", default=None, help="your own knowledge layers, comma-separated")
    parser.add_argument("--out", default=None, help="write the choice here instead of the bundled file")
    add_threads_arg(parser)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    set_threads(args.threads)

    from core.io import model_slug
    from core.methods.redeep import CalibrationTable, fit_choice, ov_copying_scores, parse_heads, parse_layers
    from core.methods.redeep.choice import DEFAULT_HEADS, DEFAULT_LAYERS, bundled_choice_path, bundled_table_path
    from core.methods.redeep.forward import DEFAULT_K_PERCENT
    from core.model.loading import EMBEDDED_NAME, load_model

    handle = load_model(device="cpu")
    table_path = bundled_table_path(TEMPLATE)
    rows = calibration_rows()
    if not args.from_table:
        recs = extract(handle, rows, args.batch_size, CACHE / f"calibration-{TEMPLATE}.jsonl")
        table = CalibrationTable(
            np.array([r["ecs"] for r in recs]), np.array([r["pks"] for r in recs]), np.array([r["label"] for r in recs])
        )
        table.save(table_path)
    table = CalibrationTable.load(table_path)
    try:
        ov, ov_refusal = ov_copying_scores(handle), None
    except ValueError as exc:
        ov, ov_refusal = None, str(exc)
    trained_on = [
        {
            "path": str((CAL / f"{name}.csv").relative_to(REPO_ROOT)),
            "label": "recalled" if label else "read",
            "rows": sum(1 for r in rows if r[0] == name),
            "sha256": _sha256(CAL / f"{name}.csv"),
        }
        for name, label in SETS
    ]
    choice = fit_choice(
        table,
        model=EMBEDDED_NAME,
        model_slug=model_slug(EMBEDDED_NAME, "", embedded=True),
        template=TEMPLATE,
        k_percent=DEFAULT_K_PERCENT,
        n_heads=args.n_heads or DEFAULT_HEADS,
        n_layers=args.n_layers if args.n_layers is not None else DEFAULT_LAYERS,
        head_method=args.head_method,
        ov=ov,
        ov_refusal=ov_refusal,
        heads=parse_heads(args.heads) if args.heads else None,
        layers=parse_layers(args.layers) if args.layers else None,
        trained_on=trained_on,
    )
    out = choice.save(args.out or bundled_choice_path(TEMPLATE))
    sys.stderr.write(f"wrote {out}\n{choice.describe()}\n")
    sys.stderr.write(
        f"alpha={choice.alpha:.4f} beta={choice.beta:.4f}  out-of-fold AUC {choice.auc_oof:.3f} "
        f"[{choice.auc_oof_ci[0]:.3f}, {choice.auc_oof_ci[1]:.3f}]  n={len(table.labels)}\n"
    )
    ecs_corr, pks_corr = np.asarray(choice.ecs_corr), np.asarray(choice.pks_corr)
    sys.stderr.write(f"ECS r: min {ecs_corr.min():+.3f} max {ecs_corr.max():+.3f}; PKS r: {np.round(pks_corr, 3)}\n")
    if ov is not None:
        sys.stderr.write(f"OV copying score: median {np.median(ov):.3f}, heads > 0.9: {int((ov > 0.9).sum())}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
