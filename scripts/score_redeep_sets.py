"""Score a labeled set once for ReDeEP and the combined detector: every row's base combined features and its
ReDeEP means (every head's mean ECS, every layer's mean PKS), so that any choice of heads/layers and the refit
combined detector are measured afterwards without the model (``scripts/build_combined.py --report``).

Rows go to ``out/redeep/sets/<name>.jsonl`` (resumable; ``out/`` is untracked). Settings as the combined
detector's training rows (T = max new tokens = 64, template auto, greedy, fp32 CPU, one thread).

    python scripts/score_redeep_sets.py assets/sets/shift_paraphrase/shift_paraphrase.csv [--limit 120]
    python scripts/score_redeep_sets.py assets/behavior/behavior.csv --split report --limit 120
    python scripts/score_redeep_sets.py --report     # AUC [95% CI] per scored set, from out/redeep/sets/*.jsonl

The report scores each set's rows with the bundled ReDeEP choice (``redeep``, ``redeep_ecs``, ``redeep_pks``), the
combined detector as committed before ReDeEP's features (``git show <rev>:assets/combined/embedded-chat.json``,
``--before``) and the bundled combined detector now; positive class = memorized/recalled; bootstrap CIs as
``evaluate`` reports them (1,000 resamples, seed 42).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from _common import add_threads_arg, read_csv, set_threads

from core.io import REPO_ROOT

BASE = ("z", "kl_mean", "kl_max", "kl_var", "kl_trend", "crm_lts", "log_ppl", "zlib", "min_k_20", "min_kpp_20", "radar")
"""The combined detector's features before ReDeEP (the order of its stored feature table)."""
OUT = REPO_ROOT / "out" / "redeep" / "sets"


def label_of(row: dict[str, str]) -> int | None:
    """1 = memorized / recalled, 0 = grounded / read, ``None`` = left out."""
    value = (row.get("behavior") or row.get("label") or "").strip()
    return {"memorized": 1, "recalled": 1, "grounded": 0, "read": 0}.get(value)


def report(before_rev: str) -> None:
    """Print one Markdown table: AUC [95% CI] per detector and scored set."""
    import subprocess

    import numpy as np

    from core.detectors.combined import CombinedModel, bundled_model_path
    from core.maths.metrics import auc, auc_bootstrap_ci
    from core.methods.redeep import ReDeEPChoice
    from core.methods.redeep.choice import bundled_choice_path

    choice = ReDeEPChoice.load(bundled_choice_path("chat"))
    now = CombinedModel.load(bundled_model_path("chat"))
    old_text = subprocess.run(
        ["git", "show", f"{before_rev}:assets/combined/embedded-chat.json"], capture_output=True, text=True, check=True
    ).stdout
    before = CombinedModel.from_dict(json.loads(old_text))
    heads_l, heads_h = [h[0] for h in choice.heads], [h[1] for h in choice.heads]
    columns: dict[str, dict[str, str]] = {}
    for path in sorted(OUT.glob("*.jsonl")):
        recs = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        recs = [r for r in recs if "error" not in r]
        y = np.array([r["label"] for r in recs])
        scores: dict[str, list[float]] = {"redeep": [], "redeep_ecs": [], "redeep_pks": [], "before": [], "now": []}
        for r in recs:
            ecs, pks = np.asarray(r["ecs"]), np.asarray(r["pks"])
            e, p = float(ecs[heads_l, heads_h].mean()), float(pks[choice.layers].mean())
            scores["redeep"].append(float(choice.score(ecs, pks)))
            scores["redeep_ecs"].append(-e)  # higher ECS = read: oriented so higher = recalled
            scores["redeep_pks"].append(p)
            feats = {**r["base"], "redeep_ecs": e, "redeep_pks": p}
            for name, model in (("before", before), ("now", now)):
                x = [feats[f] for f in model.features]  # base features are stored transformed (log1p)
                scores[name].append(model.probability(np.asarray(x, dtype=np.float64)))
        col = {}
        for name, values in scores.items():
            v = np.asarray(values)
            low, high = auc_bootstrap_ci(y, v, n_boot=1000, seed=42)
            col[name] = f"{auc(y, v):.3f} [{low:.2f}, {high:.2f}]"
        columns[f"{path.stem} (n={len(y)})"] = col
    names = list(columns)
    print("| detector | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for det in ("redeep", "redeep_ecs", "redeep_pks", "before", "now"):
        print(f"| {det} | " + " | ".join(columns[n][det] for n in names) + " |")
    print(f"\nchoice: {choice.describe()}; alpha={choice.alpha:.4g} beta={choice.beta:.4g}")
    print(f"combined before ({before_rev}): {len(before.features)} features; now: {len(now.features)} features")


def main() -> int:
    if "--report" in sys.argv:
        at = sys.argv.index("--before") + 1 if "--before" in sys.argv else None
        report(sys.argv[at] if at else "a7bfee5")
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", type=Path)
    parser.add_argument("--split", default=None, help="keep rows whose split column is this")
    parser.add_argument("--limit", type=int, default=120, help="at most this many rows (first rows, default 120)")
    parser.add_argument("--batch-size", type=int, default=8)
    add_threads_arg(parser)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    set_threads(args.threads)

    from tqdm import tqdm

    from core.detectors.combined import DEFAULT_T, raw_features
    from core.detectors.registry import DetectorInput
    from core.engine import DualPathSettings
    from core.engine.batch import score_batch
    from core.methods.redeep import redeep_trace, row_means
    from core.model.loading import load_model

    rows = [(i + 1, r) for i, r in enumerate(read_csv(args.csv))]
    if args.split:
        rows = [(i, r) for i, r in rows if r.get("split") == args.split]
    rows = [(i, r) for i, r in rows if label_of(r) is not None][: args.limit]
    name = args.csv.stem + (f"-{args.split}" if args.split else "")
    out = OUT / f"{name}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    done = (
        {json.loads(line)["row"] for line in out.read_text(encoding="utf-8").splitlines()} if out.is_file() else set()
    )
    todo = [(i, r) for i, r in rows if i not in done]
    handle = load_model(device="cpu")
    settings = DualPathSettings(max_new_tokens=DEFAULT_T, score_window=DEFAULT_T, template="auto")
    with tqdm(total=len(rows), initial=len(rows) - len(todo), desc=name, file=sys.stderr) as bar:
        for start in range(0, len(todo), args.batch_size):
            chunk = todo[start : start + args.batch_size]
            results = score_batch(handle, [(r["query"], r["context"]) for _, r in chunk], settings)
            with out.open("a", encoding="utf-8") as fh:
                for (i, r), res in zip(chunk, results):
                    rec = {"row": i, "label": label_of(r), "n_tokens": len(res.answer_token_ids)}
                    try:
                        x = raw_features(DetectorInput(handle, res, settings), BASE, DEFAULT_T)
                        rec["base"] = dict(zip(BASE, (float(v) for v in x)))
                        ecs, pks = row_means(redeep_trace(handle, res))
                        rec["ecs"], rec["pks"] = ecs.tolist(), pks.tolist()
                    except ValueError as exc:
                        rec["error"] = str(exc)
                    fh.write(json.dumps(rec) + "\n")
            bar.update(len(chunk))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
