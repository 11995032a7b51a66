"""Score a labeled set once for ReDeEP and the combined detector: every row's base combined features and its
ReDeEP means (every head's mean ECS, every layer's mean PKS), so that any choice of heads/layers and the refit
combined detector are measured afterwards without the model (``scripts/build_combined.py --report``).

Rows go to ``out/redeep/sets/<name>.jsonl`` (resumable; ``out/`` is untracked). Settings as the combined
detector's training rows (T = max new tokens = 64, template auto, greedy, fp32 CPU, one thread).

    python scripts/score_redeep_sets.py assets/sets/shift_paraphrase/shift_paraphrase.csv [--limit 120]
    python scripts/score_redeep_sets.py assets/behavior/behavior.csv --split report --limit 120
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


def main() -> int:
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
