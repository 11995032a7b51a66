"""Score the rows the two-axis headline is calibrated and measured on, with the embedded model (both paths'
greedy answers and the teacher-forced log-probabilities), and write each row's result to a JSON-lines file.

Rows (``set`` column of the output):

* ``behavior`` — every row of ``assets/behavior/behavior.csv`` with its ``split`` (calibration rows fit, report
  rows are only measured);
* ``clean`` / ``memorized`` — ``assets/calibration/`` (invented facts read from the context; known facts whose
  context agrees with memory);
* ``paraphrase`` — every second calibration row of all three (behavior calibration split, clean, memorized) with the
  question reworded to ask for a short answer ("Answer in a few words: …"): short answers of 1–3 tokens and
  paraphrased questions, for part 4 of issue 23 (never a report row).

Greedy answers of at most 16 new tokens, as the behavior labels were read (the context-reliance axis looks at the
first 16 answer tokens only, :data:`core.engine.axes.RELIANCE_WINDOW`, so the fit carries to longer answers).

    python scripts/score_axes_rows.py [--out out/axes/rows.jsonl] [--limit N] [--max-new-tokens 16]
    python scripts/score_axes_rows.py --heldout other_behavior.csv --out out/axes/heldout.jsonl   # measured only
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from _common import read_csv

from core.io import asset_path

PARAPHRASES = ("Answer in a few words: {q}", "In one short phrase: {q}", "Briefly, {ql}")


def paraphrase(query: str, i: int) -> str:
    """The ``i``-th short-answer rewording of ``query`` (cycling through :data:`PARAPHRASES`)."""
    form = PARAPHRASES[i % len(PARAPHRASES)]
    return form.format(q=query, ql=query[:1].lower() + query[1:])


def heldout_rows(path: Path) -> list[dict]:
    """Every row of another behavior-labeled CSV (``python -m core conflict``'s output), as report rows of the set
    ``heldout``: measured only, never fitted on."""
    return [{"set": "heldout", **r, "split": "report"} for r in read_csv(path)]


def rows() -> list[dict]:
    out: list[dict] = []
    for r in read_csv(asset_path("behavior") / "behavior.csv"):
        out.append({"set": "behavior", **r})
    for name in ("clean", "memorized"):
        for r in read_csv(asset_path("calibration") / f"{name}.csv"):
            out.append({"set": name, "split": "calibration", "kind": name, **r})
    cal = [r for r in out if r["split"] == "calibration"]
    for i, r in enumerate(cal[::2]):
        out.append({**r, "set": "paraphrase", "origin": r["set"], "query": paraphrase(r["query"], i)})
    return out


def _key(row: dict) -> tuple[str, str, str]:
    return row["set"], row["query"], row["context"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("out/axes/rows.jsonl"))
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--shard", default="0/1", help="i/n: score every n-th selected row from the i-th")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on a shared CPU)")
    ap.add_argument("--done", type=Path, nargs="*", default=[], help="skip the rows already in these files")
    ap.add_argument("--split", choices=("calibration", "report", "all"), default="all")
    ap.add_argument("--sets", default="behavior,clean,memorized,paraphrase", help="comma-separated sets to score")
    ap.add_argument(
        "--free-parametric",
        action="store_true",
        help="generate the parametric answer (otherwise a behavior row takes its no_context_answer, the same "
        "greedy answer of the parametric prompt generated when the set was built)",
    )
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--heldout", type=Path, default=None, help="score this behavior-labeled CSV instead (set heldout)")
    args = ap.parse_args()

    import torch

    from core.engine import DualPathSettings, ScoreRequest, score_rows
    from core.model.loading import load_model

    sets = {"heldout"} if args.heldout else set(args.sets.split(","))
    source = heldout_rows(args.heldout) if args.heldout else rows()
    items = [r for r in source if r["set"] in sets and args.split in ("all", r["split"])]
    done = set()
    for path in args.done:
        with path.open(encoding="utf-8") as fh:
            done |= {_key(json.loads(line)["row"]) for line in fh}
    shard, shards = (int(v) for v in args.shard.split("/"))
    items = [r for r in items if _key(r) not in done][shard::shards][: args.limit or None]
    torch.set_num_threads(args.threads)
    handle = load_model()
    settings = DualPathSettings(max_new_tokens=args.max_new_tokens, score_window=64)
    request = ScoreRequest(settings=settings, free_parametric=args.free_parametric)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", encoding="utf-8") as fh:
        chunk = 16
        for start in range(0, len(items), chunk):
            part = items[start : start + chunk]
            results = score_rows(handle, [(r["query"], r["context"]) for r in part], request)
            for r, res in zip(part, results):
                if not args.free_parametric and r.get("no_context_answer") and r["set"] in ("behavior", "heldout"):
                    res = replace(res, parametric=replace(res.parametric, answer=r["no_context_answer"], finish="set"))
                fh.write(json.dumps({"row": r, "result": res.to_dict()}, ensure_ascii=False) + "\n")
            fh.flush()
            print(f"{start + len(part)}/{len(items)}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
