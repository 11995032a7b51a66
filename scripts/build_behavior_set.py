"""Rebuild the bundled behavior-labeled conflict set ``assets/behavior/`` (issue 23) with the embedded model.

The two inputs are files written by others and are not bundled: the ROME paper's ``known_1000`` facts (a list in
its form, MIT) and NQ-Swap records (JSONL: question, sub_context, org_answer, sub_answer). The set is built by
``python -m core conflict`` with the settings below; every answer is cached in ``out/behavior/answers.json``
(git-ignored), so a second run only generates what changed. The README gets the attribution of
``scripts/behavior_attribution.md``.

    HF_HUB_OFFLINE=1 python scripts/build_behavior_set.py KNOWN_FACTS.json NQ_SWAP.jsonl
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.cli import main as cli_main  # noqa: E402

NQ_LIMIT = 300
MAX_NEW_TOKENS = 16
SEED = 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("facts", help="the ROME known_1000 facts (JSON list)")
    parser.add_argument("nq", help="NQ-Swap records (JSONL)")
    parser.add_argument("--out", default=str(ROOT / "assets" / "behavior"))
    parser.add_argument("--cache", default=str(ROOT / "out" / "behavior" / "answers.json"))
    parser.add_argument("--limit", type=int, default=None, help="a seeded sample of N facts (default: all)")
    args = parser.parse_args()
    Path(args.cache).parent.mkdir(parents=True, exist_ok=True)
    argv = [
        "conflict",
        args.facts,
        "--nq",
        args.nq,
        "--nq-limit",
        str(NQ_LIMIT),
        "--with-project-sets",
        "--max-new-tokens",
        str(MAX_NEW_TOKENS),
        "--batch-size",
        "16",
        "--seed",
        str(SEED),
        "--device",
        "cpu",
        "--cache",
        args.cache,
        "--attribution",
        str(ROOT / "scripts" / "behavior_attribution.md"),
        "--out",
        args.out,
        *([] if args.limit is None else ["--limit", str(args.limit)]),
    ]
    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
