"""``python -m core calibrate`` — set RePCS' τ on clean rows, check it on held-out rows, write it as JSON.

Examples::

    # score a labeled CSV (batched), calibrate on half of its grounded rows, write τ
    python -m core calibrate assets/probes/probes.csv --write-threshold tau.json --alpha 0.05 --epsilon 0.05

    # reuse the rows of an earlier `python -m core evaluate … --out result.json` (no model call)
    python -m core calibrate result.json --write-threshold tau.json --out calibration.json

    # apply that τ anywhere
    python -m core run --query … --context … --threshold-file tau.json
    python -m core evaluate data.csv --out r.json --threshold-file tau.json

With ``--threshold-file`` the given τ's achieved FPR/FNR on the held-out rows is printed next to the new one.
The threshold file is :class:`core.engine.threshold.Threshold` JSON (τ, α, T, model, template, γ̂, Δ̂, ε, PAC n,
held-out FPR/FNR) and, in the default ``--tau-mode length``, the length-aware τ(L) with its bootstrap band
(``length_tau``); that setting refuses a set with fewer than ⌈1/α⌉ clean calibration rows in each length
bucket (the shorter and the longer half) and says how many are needed. ``--tau-mode paper`` calibrates the
paper's constant τ alone. The held-out FPR/FNR are also printed per answer length, for both calibrations.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from core.cli.common import add_model_args, load_handle, row_progress, settings_from_args, threshold_from_args
from core.engine import DEFAULT_BATCH_SIZE, score_rows
from core.evaluation import (
    DEFAULT_ALPHA,
    DEFAULT_EPSILON,
    DEFAULT_FRACTION,
    calibrate_records,
    check_threshold,
    read_labeled_csv,
)
from core.evaluation.length_rates import length_table
from core.io import MiB, atomic_write_json, check_output_path, read_user_file

REPORT_MAX_BYTES = 512 * MiB
"""The largest ``evaluate --out`` report read back (bytes; a 5,000-row report is a few MiB)."""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "calibrate",
        help="set RePCS τ as the α-quantile of Z on clean rows; held-out FPR/FNR and the PAC n; write τ as JSON",
    )
    p.add_argument("data", help="labeled CSV (query,context,label) or the JSON written by `evaluate --out`")
    p.add_argument("--write-threshold", default=None, metavar="PATH", help="write the calibrated τ here (JSON)")
    p.add_argument("--out", default=None, metavar="PATH", help="write the full calibration report here (JSON)")
    p.add_argument("--alpha", type=float, default=DEFAULT_ALPHA, help="target false-positive rate α (default 0.05)")
    p.add_argument("--epsilon", type=float, default=DEFAULT_EPSILON, help="ε of the PAC bound (default 0.05)")
    p.add_argument(
        "--calibration-fraction",
        type=float,
        default=DEFAULT_FRACTION,
        help="share of grounded rows used to set τ, chosen at random with --seed (default 0.5)",
    )
    p.add_argument(
        "--calibration-rows",
        default=None,
        help="comma-separated row numbers of grounded rows to calibrate on (overrides the fraction)",
    )
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE)
    add_model_args(p)
    p.set_defaults(func=_cmd_calibrate, max_new_tokens=32)


def _rows_arg(text: str | None) -> set[int] | None:
    if not text:
        return None
    try:
        return {int(t) for t in text.split(",") if t.strip()}
    except ValueError:
        raise ValueError(f"--calibration-rows must be comma-separated row numbers, got {text!r}") from None


def _check_rows(wanted: set[int] | None, labels: dict[int, str], source: str) -> None:
    """``--calibration-rows`` must name grounded rows of the data (τ is set on grounded rows only)."""
    if not wanted:
        return
    missing = sorted(wanted - set(labels))
    if missing:
        shown = ", ".join(str(n) for n in missing[:8]) + (" …" if len(missing) > 8 else "")
        span = f"rows {min(labels)}–{max(labels)}" if labels else "no rows"
        raise ValueError(f"--calibration-rows: row(s) {shown} are not in {source} (it has {span}).")
    memorized = sorted(n for n in wanted if labels[n] != "grounded")
    if memorized:
        shown = ", ".join(str(n) for n in memorized[:8]) + (" …" if len(memorized) > 8 else "")
        raise ValueError(
            f"--calibration-rows: row(s) {shown} of {source} are labeled {labels[memorized[0]]}; τ is calibrated "
            "on grounded rows only."
        )


def _records_from_report(path: Path) -> tuple[list[dict[str, Any]], int, str, str | None]:
    data = read_user_file(path, REPORT_MAX_BYTES, "report file")
    try:
        report = json.loads(data.decode("utf-8"))
        rows = report["rows"]
        T = int(report["settings"]["score_window"])
        model = str(report["model"])
        template = report["settings"].get("template")
        for r in rows:
            r["row"], r["label"], r["repcs_score"]
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"{path} is not a result of `python -m core evaluate` ({exc})") from exc
    return rows, T, model, template


def _check_values(args: argparse.Namespace) -> None:
    """Every value and output location, before any file is scored (a run can take hours)."""
    for flag, value in (("--alpha", args.alpha), ("--epsilon", args.epsilon)):
        if not 0.0 < value < 1.0:
            raise ValueError(f"{flag} must lie strictly between 0 and 1, got {value}")
    if not 0.0 < args.calibration_fraction <= 1.0:
        raise ValueError(f"--calibration-fraction must be in (0, 1], got {args.calibration_fraction}")
    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be at least 1, got {args.batch_size}")
    _rows_arg(args.calibration_rows)
    if args.out:
        check_output_path(args.out, "--out file")
    if args.write_threshold:
        check_output_path(args.write_threshold, "--write-threshold file")


def _records_from_csv(args: argparse.Namespace, path: Path) -> tuple[list[dict[str, Any]], int, str, str]:
    """Score a labeled CSV: one record per row (row, label, Z, γ̂, L), T, the model's name and the template."""
    rows = read_labeled_csv(path)
    _check_rows(_rows_arg(args.calibration_rows), {r.row: r.label for r in rows}, path.name)
    for note in getattr(rows, "notes", ()):
        sys.stderr.write(f"note: {note}\n")
    settings = settings_from_args(args)
    handle = load_handle(args)
    with row_progress(len(rows)) as progress:
        results = score_rows(
            handle,
            [(r.query, r.context) for r in rows],
            settings,
            batch_size=args.batch_size,
            progress=progress,
        )
    records = [
        {
            "row": r.row,
            "label": r.label,
            "repcs_score": res.repcs_score,
            "max_abs_log_ratio": res.max_abs_log_ratio,
            "n_tokens": res.n_tokens,
        }
        for r, res in zip(rows, results)
    ]
    return records, settings.score_window, handle.info.name, settings.template


def _cmd_calibrate(args: argparse.Namespace) -> int:
    path = Path(args.data)
    _check_values(args)
    given, _ = threshold_from_args(args) if args.threshold_file else (None, None)
    if path.suffix.lower() == ".json":
        records, T, model, template = _records_from_report(path)
        _check_rows(_rows_arg(args.calibration_rows), {int(r["row"]): str(r["label"]) for r in records}, path.name)
    else:
        records, T, model, template = _records_from_csv(args, path)
    report = calibrate_records(
        records,
        _rows_arg(args.calibration_rows),
        T=T,
        model=model,
        alpha=args.alpha,
        epsilon=args.epsilon,
        fraction=args.calibration_fraction,
        seed=args.seed,
        template=template,
        source=f"calibrated on {path.name}",
        mode=args.tau_mode,
    )
    out = report.to_dict()
    held = [r for r in records if r["row"] not in set(report.threshold.extra.get("calibration_rows", []))]
    if given is not None:
        out["given_threshold"] = check_threshold(given, held)
    if args.out:
        atomic_write_json(args.out, out)
    if args.write_threshold:
        report.threshold.save(args.write_threshold)
    sys.stdout.write("\n".join(_summary_lines(args, report, out, model, T)) + "\n")
    return 0


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1%}"


def _summary_lines(args: argparse.Namespace, report: Any, out: dict[str, Any], model: str, T: int) -> list[str]:
    """What ``calibrate`` prints: τ (and τ(L)), held-out rates, PAC, the given τ, rates by length, warnings."""
    pct = _pct
    delta = "n/a" if report.delta is None else f"{report.delta:.3f}"
    n_required = "n/a" if report.n_required is None else f"{report.n_required:,}"
    lt = report.threshold.length_tau
    lines = [
        f"model:        {model}   T = {T}",
        f"τ = {report.tau:.4f} nats  ({args.alpha:g}-quantile of Z over {report.n_calibration} clean rows; paper)",
    ]
    if lt is not None:
        lines.append(
            f"τ(L) = {math.exp(lt.intercept):.4f} · L^{lt.slope:.3f} nats  (length-aware, L = {lt.L_min}–{lt.L_max} "
            f"scored tokens; {lt.band_level:.0%} bootstrap band; outside it or outside those lengths: inconclusive)"
        )
    lines += [
        (
            f"held-out:     FPR {pct(report.fpr_heldout)} on {report.n_heldout_clean} grounded rows,"
            f"  FNR {pct(report.fnr_heldout)} on {report.n_heldout_memorized} memorized rows"
            f"  ({'τ(L)' if lt is not None else 'constant τ'})"
        ),
        f"PAC:          γ̂ = {report.gamma:.3f}  Δ̂ = {delta}  ε = {args.epsilon:g}  →  n ≥ {n_required}",
    ]
    lines += _pac_lines(report.pac or {})
    if "given_threshold" in out:
        g = out["given_threshold"]
        lines.append(f"given τ = {g['tau']:.4f} (T = {g['T']}): held-out FPR {pct(g['fpr'])}, FNR {pct(g['fnr'])}")
    if lt is not None:
        lines.append(
            f"              constant τ: FPR {pct(report.fpr_heldout_constant)}, FNR {pct(report.fnr_heldout_constant)}"
        )
        inconclusive = report.inconclusive_heldout or {}
        lines.append(
            f"inconclusive: {pct(inconclusive.get('grounded'))} of held-out grounded rows, "
            f"{pct(inconclusive.get('memorized'))} of memorized rows"
        )
    if report.rates_by_length:
        lines.append("by length (held-out; FPR / FNR with Wilson 95% CI):")
        lines += [f"  {line}" for line in length_table(report.rates_by_length)]
    lines += [f"warning:      {w}" for w in report.warnings]
    if args.write_threshold:
        lines.append(f"threshold → {args.write_threshold}")
    return lines


def _pac_lines(pac: dict[str, Any]) -> list[str]:
    """The PAC line with γ over the vocabulary (Lemma III.3) and the effective T, when the report has it."""
    if not pac.get("n"):
        return []
    vocab = pac["gamma"].get("vocabulary")
    return [
        "              γ over the vocabulary (Lemma III.3) = "
        + ("n/a" if vocab is None else f"{vocab:.3f}")
        + f" → n ≥ {pac['n']['vocabulary']['nominal']} at T = {pac['T']['nominal']:g}; effective T (mean L) "
        + ("n/a" if pac["T"]["mean"] is None else f"{pac['T']['mean']:.1f}")
        + f" → n ≥ {pac['n']['vocabulary']['mean']} (vocabulary γ), {pac['n']['realised_token']['mean']} (γ̂)"
    ]
