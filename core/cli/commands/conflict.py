"""``python -m core conflict`` — build a knowledge-conflict set labeled by the model's own answers.

Example::

    python -m core conflict facts.json --nq nq_swap.jsonl --nq-limit 300 --out my_set/

``FACTS.json`` is a list of facts in the ROME ``known_1000`` form (``subject``, ``attribute``, ``template`` with
``{}`` for the subject, ``relation_id``; optional ``question`` and ``aliases``). Facts the model answers without
context give a counterfactual row and an on-topic row; ``--nq`` adds NQ-Swap rows (real prose). Every row is
answered with its context and labeled read / recalled by what the answer names; the rest are left out and
counted (:mod:`core.evaluation.conflict`). Writes ``DIR/<name>.csv`` (``python -m core evaluate`` reads it),
``DIR/counts.json`` and ``DIR/README.md``; progress goes to stderr, the counts to stdout. Every input is checked
before the model is loaded.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

from core.cli.common import DTYPES, load_handle, parse_device
from core.evaluation.conflict import (
    AnswerCache,
    BuildOptions,
    build_conflict_set,
    counts_lines,
    sample_facts,
    write_set,
)
from core.evaluation.conflict_sources import (
    DEFAULT_CONTEXT_WORDS,
    SourceRow,
    project_rows,
    read_facts,
    read_nq_swap,
)
from core.io import KiB, check_output_path, read_user_text

DEFAULT_NQ_LIMIT = 300
MAX_ATTRIBUTION_BYTES = 256 * KiB
"""Largest ``--attribution`` text (read as a regular file with a cap: a device or a pipe is refused)."""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "conflict", help="build a knowledge-conflict set from a fact list, labeled by the model's own answers"
    )
    p.add_argument("facts", help="JSON list of facts: subject, attribute, template ('{}' = subject), relation_id")
    p.add_argument("--out", required=True, help="folder to write the set into (created; files in it are replaced)")
    p.add_argument("--name", default="behavior", help="the CSV's file name without .csv (default: behavior)")
    p.add_argument("--nq", default=None, help="NQ-Swap JSONL (question, sub_context, org_answer, sub_answer)")
    p.add_argument(
        "--nq-limit", type=int, default=DEFAULT_NQ_LIMIT, help=f"NQ-Swap rows to sample (default {DEFAULT_NQ_LIMIT})"
    )
    p.add_argument("--limit", type=int, default=None, help="use a seeded sample of at most N facts (default: all)")
    p.add_argument("--context-words", type=int, default=DEFAULT_CONTEXT_WORDS, help="most words of an NQ passage")
    p.add_argument("--with-project-sets", action="store_true", help="add the bundled conflict set and invented facts")
    p.add_argument("--max-new-tokens", type=int, default=16, help="tokens per generated answer (1–256; default 16)")
    p.add_argument("--batch-size", type=int, default=16, help="answers generated together (default 16)")
    p.add_argument("--seed", type=int, default=0, help="seed of the samples, the counterfactual objects and the split")
    p.add_argument("--calibration-fraction", type=float, default=0.5, help="share of subjects in the calibration split")
    p.add_argument("--cache", default=None, help="JSON file caching the model's answers between runs")
    p.add_argument("--attribution", default=None, help="a text file appended to the README (sources and licenses)")
    p.add_argument("--model", default=None, help="hub id or local folder (default: the embedded SmolLM2)")
    p.add_argument("--revision", default=None, help="hub revision (branch, tag or commit)")
    p.add_argument("--device", type=parse_device, default=None, help="cpu, cuda or cuda:N")
    p.add_argument("--dtype", choices=list(DTYPES), default=None, help="weights' dtype")
    p.set_defaults(func=_cmd_conflict)


def _check_out_dir(path: str) -> Path:
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {path} exists and is not a folder.")
    parent = out if out.exists() else out.parent
    if not parent.is_dir():
        raise ValueError(f"--out {path}: its parent folder {parent} does not exist.")
    return out


def _progress(done: int, total: int, text: str = "") -> None:
    sys.stderr.write(f"{text}: {done}/{total}\n" if text else f"{done}/{total}\n")
    sys.stderr.flush()


def _cmd_conflict(args: argparse.Namespace) -> int:
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,80}", args.name) or args.name.startswith("."):
        raise ValueError(f"--name must be 1–80 letters, digits, '_', '-' or '.', got {args.name!r}")
    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit must be at least 1, got {args.limit}")
    if args.nq_limit < 1:
        raise ValueError(f"--nq-limit must be at least 1, got {args.nq_limit}")
    if args.context_words < 10:
        raise ValueError(f"--context-words must be at least 10, got {args.context_words}")
    if args.nq is None and args.nq_limit != DEFAULT_NQ_LIMIT:
        raise ValueError("--nq-limit needs --nq")
    options = BuildOptions(
        max_new_tokens=args.max_new_tokens,
        batch_size=args.batch_size,
        seed=args.seed,
        calibration_fraction=args.calibration_fraction,
    )
    options.validate()
    out = _check_out_dir(args.out)
    check_output_path(out / f"{args.name}.csv", "--out folder")
    if args.cache:
        check_output_path(args.cache, "--cache file")
    attribution = ""
    if args.attribution:
        attribution = read_user_text(args.attribution, MAX_ATTRIBUTION_BYTES, "--attribution file")
    pool = read_facts(args.facts)
    facts = sample_facts(pool, args.limit, args.seed)
    extra: list[SourceRow] = []
    left_out: dict[str, int] = {}
    sources = [f"{Path(args.facts).name} ({len(facts)} of its {len(pool)} facts)"]
    if args.nq:
        nq_rows, left_out = read_nq_swap(args.nq, limit=args.nq_limit, seed=args.seed, max_words=args.context_words)
        extra += nq_rows
        sources.append(f"{Path(args.nq).name} (a seeded sample of up to {args.nq_limit} records)")
    if args.with_project_sets:
        extra += project_rows()
        sources.append("the project's conflict set and invented-fact probes")
    handle = load_handle(args)
    cache = AnswerCache(args.cache, handle.info.name, options.max_new_tokens) if args.cache else None
    built = build_conflict_set(
        handle, facts, options, extra_rows=extra, extra_left_out=left_out, cache=cache, progress=_progress, pool=pool
    )
    path = write_set(out, built, name=args.name, sources=sources, attribution=attribution)
    for line in counts_lines(built.counts):
        sys.stdout.write(line + "\n")
    sys.stdout.write(f"→ {path} ({len(built.rows)} rows)\n")
    return 0
