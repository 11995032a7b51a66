"""The validity table: every detector's AUC [95% CI] on every bundled labeled set, side by side.

For each set — ``assets/probes/probes.csv`` (``probes``) and every ``assets/sets/<name>/<name>.csv`` (its
``<name>_source.csv`` while the behavioral column has not been added) — this runs

    python -m core evaluate SET --detectors cheap[,combined] --sigmas '' --out out/validity/<name>.json

(the combined detector is added when one is registered and ``cheap`` does not already include it), then prints
one Markdown table: one row per detector, one column per set, each cell ``AUC [low, high]`` (positive class
*memorized*; percentile-bootstrap 95% CI, 1,000 resamples, seed 42, as ``evaluate`` reports it). For the
unscreened set a second column gives the same on its behavior-confirmed subset (memorized rows whose
no-context answer contains the expected answer, grounded rows whose does not — the ``parametric_correct``
column), computed from the same run's per-row scores (fitted detectors: their out-of-fold scores over the whole
set). ``assets/probes/conflict.csv`` has no memorized/grounded labels, so it has no AUC and is left out (see
``assets/probes/README.md`` for what the model followed there).

    HF_HUB_OFFLINE=1 python scripts/validity_table.py                       # every set, then the table
    HF_HUB_OFFLINE=1 python scripts/validity_table.py --set unscreened      # one set (repeatable)
    python scripts/validity_table.py --table-only                           # the table from out/validity/*.json

Every set is run with ``evaluate``'s default settings unless ``--max-new-tokens`` / ``--window`` are given, on
one CPU thread unless ``--threads`` says otherwise (on an oversubscribed 2-core machine, torch's default of
two threads made the first batch about five times slower);
the table's footer lists the settings each report was made with and says so when they differ.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from core.io import ASSETS, REPO_ROOT

OUT_DIR = REPO_ROOT / "out" / "validity"
CONFIRMED_SET = "unscreened"
BEHAVIOR_HEADER = (
    "| set | rows | labels confirmed by behavior | memorized: retrieval answer has the answer | "
    "grounded: retrieval answer has the answer |"
)
SKIPPED = {"conflict": "no memorized/grounded labels (the context contradicts a known fact): no AUC"}


def labeled_sets() -> dict[str, Path]:
    """The sets of the table by name: ``probes`` first, then the folders of ``assets/sets/``."""
    sets = {"probes": ASSETS / "probes" / "probes.csv"}
    folder = ASSETS / "sets"
    if folder.is_dir():
        for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
            for path in (sub / f"{sub.name}.csv", sub / f"{sub.name}_source.csv"):  # built first, else source
                if path.is_file():
                    sets[sub.name] = path
                    break
    return sets


def combined_detectors() -> list[str]:
    """Registered detectors that combine others (name starting ``combined``, or defined in a ``combined``
    module), in registration order; empty while none is registered."""
    from core.detectors import available

    return [
        name
        for name, det in available().items()
        if name.startswith("combined") or "combined" in getattr(det.score, "__module__", "")
    ]


def detector_choice() -> str:
    """``--detectors`` for ``evaluate``: ``cheap``, plus any combined detector ``cheap`` leaves out."""
    from core.detectors import available

    cheap = {n for n, d in available().items() if d.cost in ("free", "forward")}
    extra = [n for n in combined_detectors() if n not in cheap]
    return ",".join(["cheap", *extra]) if extra else "cheap"


def run_evaluate(name: str, path: Path, args: argparse.Namespace) -> Path:
    """Run ``python -m core evaluate`` on one set; returns the report's path."""
    out = args.out_dir / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "core",
        "evaluate",
        str(path),
        "--detectors",
        detector_choice(),
        "--sigmas",
        "",
        "--bootstrap",
        str(args.bootstrap),
        "--out",
        str(out),
    ]
    for flag in ("max_new_tokens", "window", "batch_size"):
        value = getattr(args, flag)
        if value is not None:
            cmd += [f"--{flag.replace('_', '-')}", str(value)]
    env = dict(os.environ)
    if args.threads:
        env.update({"OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)})
    print(f"$ {' '.join(cmd)}", file=sys.stderr, flush=True)
    subprocess.run(cmd, cwd=REPO_ROOT, check=True, env=env)
    return out


def subset_metrics(report: dict[str, Any], keep: list[bool], n_boot: int) -> dict[str, dict[str, Any]]:
    """AUC and bootstrap CI of every detector over the report's rows where ``keep`` is true."""
    from core.detectors import get
    from core.evaluation.data import SEED
    from core.maths.metrics import auc, auc_bootstrap_ci

    rows = [r for r, k in zip(report["rows"], keep) if k]
    out: dict[str, dict[str, Any]] = {}
    for name in report["detectors"]:
        try:
            det = get(name)
        except (KeyError, ValueError):
            continue
        pairs = [(r["label"] == "memorized", r["scores"].get(name)) for r in rows]
        pairs = [(y, det.oriented(v)) for y, v in pairs if v is not None and np.isfinite(v)]
        y = np.array([int(p[0]) for p in pairs])
        s = np.array([p[1] for p in pairs], dtype=np.float64)
        if y.size == 0 or y.min() == y.max():
            out[name] = {"auc": None, "auc_ci": None, "n": int(y.size)}
            continue
        out[name] = {
            "auc": auc(y, s),
            "auc_ci": list(auc_bootstrap_ci(y, s, n_boot=n_boot, seed=SEED)),
            "n": int(y.size),
        }
    return out


def confirmed_mask(report: dict[str, Any]) -> list[bool]:
    """Per row: the label is confirmed by the model's behavior (``parametric_correct``)."""
    from core.evaluation.data import label_confirmed

    return [bool(label_confirmed(r["label"], r)) for r in report["rows"]]


def cell(entry: dict[str, Any] | None, total: int | None = None) -> str:
    """``0.952 [0.925, 0.976]``, ``n/a``, and ``(n = 65 of 88)`` when the detector scored fewer rows than the
    column has (it failed on the others; the report's ``errors`` say why)."""
    if not entry or entry.get("auc") is None:
        return "n/a"
    ci = entry.get("auc_ci") or [None, None]
    text = f"{entry['auc']:.3f}" if ci[0] is None else f"{entry['auc']:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"
    n = entry.get("n")
    if total is not None and n is not None and n < total:
        text += f" (n = {n} of {total})"
    return text


def behavior(report: dict[str, Any]) -> str:
    """Rows, labels, and what the model did: known without context / read from the context."""
    rows = report["rows"]
    mem = [r for r in rows if r["label"] == "memorized"]
    grd = [r for r in rows if r["label"] == "grounded"]
    confirmed = sum(confirmed_mask(report))

    def read(rs: list[dict[str, Any]]) -> str:
        scored = [r for r in rs if r.get("extra.answer")]
        hits = sum(str(r["extra.answer"]).casefold() in str(r.get("rag_answer", "")).casefold() for r in scored)
        return f"{hits}/{len(scored)}" if scored else "n/a"

    return f"{len(rows)} ({len(mem)} mem / {len(grd)} grd) | {confirmed} | {read(mem)} | {read(grd)}"


def table(reports: dict[str, dict[str, Any]], n_boot: int) -> str:
    """The Markdown table (detectors × sets) and its footer."""
    columns: list[tuple[str, dict[str, dict[str, Any]], int]] = []
    for name, report in reports.items():
        columns.append((f"`{name}`", report["detectors"], len(report["rows"])))
        if name == CONFIRMED_SET:
            mask = confirmed_mask(report)
            columns.append((f"`{name}` (confirmed)", subset_metrics(report, mask, n_boot), sum(mask)))
    names: list[str] = []
    for report in reports.values():
        names += [n for n in report["detectors"] if n not in names]
    lines = [
        "| detector | " + " | ".join(title for title, _, _ in columns) + " |",
        "|---" * (len(columns) + 1) + "|",
    ]
    for det in names:
        lines.append(f"| `{det}` | " + " | ".join(cell(m.get(det), total) for _, m, total in columns) + " |")
    lines += [
        "",
        BEHAVIOR_HEADER,
        "|---|---|---|---|---|",
    ]
    lines += [f"| `{name}` | {behavior(report)} |" for name, report in reports.items()]
    settings = {name: json.dumps(r.get("settings", {}), sort_keys=True) for name, r in reports.items()}
    lines.append("")
    if len(set(settings.values())) == 1:
        lines.append(
            f"Settings of every run: {next(iter(settings.values()))}; model {next(iter(reports.values()))['model']}."
        )
    else:
        lines.append("**The runs used different settings:**")
        lines += [f"* `{name}`: {s}" for name, s in settings.items()]
    combined = combined_detectors()
    lines.append(
        f"Combined detector(s) registered: {', '.join(combined)}."
        if combined
        else "No combined detector was registered when this table was made."
    )
    lines += [f"`{name}` left out: {why}." for name, why in SKIPPED.items()]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", action="append", dest="sets", metavar="NAME", help="only this set (repeatable)")
    parser.add_argument("--table-only", action="store_true", help="no runs: the table from existing reports")
    parser.add_argument("--out-dir", type=Path, default=OUT_DIR, help="where the reports go (default out/validity)")
    parser.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for the CIs (default 1000)")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="passed to evaluate (default: its own)")
    parser.add_argument("--window", type=int, default=None, help="passed to evaluate (default: its own)")
    parser.add_argument("--batch-size", type=int, default=None, help="passed to evaluate (default: its own)")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="CPU threads of each evaluate run (OMP_NUM_THREADS; default 1, fastest on a shared machine; 0 = "
        "torch's default)",
    )
    args = parser.parse_args()

    sets = labeled_sets()
    chosen = args.sets or list(sets)
    unknown = [s for s in chosen if s not in sets]
    if unknown:
        parser.error(f"unknown set(s) {unknown}; the sets are {list(sets)} ({', '.join(SKIPPED)} has no labels)")
    reports: dict[str, dict[str, Any]] = {}
    for name in chosen:
        path = args.out_dir / f"{name}.json"
        if not args.table_only:
            path = run_evaluate(name, sets[name], args)
        if path.is_file():
            reports[name] = json.loads(path.read_text(encoding="utf-8"))
        else:
            print(f"no report for {name} ({path}); run without --table-only", file=sys.stderr)
    if not reports:
        return 1
    print(table(reports, args.bootstrap))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
