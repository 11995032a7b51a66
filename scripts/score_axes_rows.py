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

    python scripts/score_axes_rows.py [--out out/axes/rows.jsonl] [--limit N]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from _common import read_csv

from core.io import asset_path

PARAPHRASES = ("Answer in a few words: {q}", "In one short phrase: {q}", "Briefly, {ql}")


def paraphrase(query: str, i: int) -> str:
    """The ``i``-th short-answer rewording of ``query`` (cycling through :data:`PARAPHRASES`)."""
    form = PARAPHRASES[i % len(PARAPHRASES)]
    return form.format(q=query, ql=query[:1].lower() + query[1:])


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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("out/axes/rows.jsonl"))
    ap.add_argument("--limit", type=int, default=0)
    args = ap.parse_args()

    from core.engine import DualPathSettings, ScoreRequest, score_rows
    from core.model.loading import load_model

    items = rows()[: args.limit or None]
    handle = load_model()
    request = ScoreRequest(settings=DualPathSettings(), free_parametric=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", encoding="utf-8") as fh:
        chunk = 64
        for start in range(0, len(items), chunk):
            part = items[start : start + chunk]
            results = score_rows(handle, [(r["query"], r["context"]) for r in part], request)
            for r, res in zip(part, results):
                fh.write(json.dumps({"row": r, "result": res.to_dict()}, ensure_ascii=False) + "\n")
            fh.flush()
            print(f"{start + len(part)}/{len(items)}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
