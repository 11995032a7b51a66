"""``python -m core ablate`` — noise injection and activation patching on chosen decoder layers.

Examples::

    python -m core ablate --query Q --context C --layers 4-8 --eps 0.5 --seeds 3 --json
    python -m core ablate --query Q --context C --layers middle --grid 0,0.1,0.5,1 --seeds 3
    python -m core ablate --query Q --context C --sweep --eps 0.5
    python -m core ablate --query Q --context C --layers 10,12 --patch

Every run scores Z = Σ_{t<T} KL(P_rag,t ‖ P_para,t) on short answers (``--max-new-tokens``, default 16;
T = the same, ``--window`` is not used) next to a clean reference computed with the same settings.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from tqdm import tqdm

from core.cli.common import add_model_args, load_handle, settings_from_args
from core.methods.ablation import MAX_EPS, MAX_RUNS, dose_response, layer_sweep, patching_scores, sweep_settings
from core.methods.ablation.degenerate import annotate_report
from core.scale.options import add_ray_args, check_ray_args, sweep_from_args


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "ablate",
        help="noise injection / activation patching on chosen layers: Z clean vs perturbed (CRM §4.4)",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    p.add_argument("--query", required=True)
    p.add_argument("--context", required=True)
    p.add_argument(
        "--layers",
        default=None,
        help="decoder layers (0-based): 4-8, 3, 1,3,5-7, or early|middle|late|control|all (required except with "
        "--sweep, "
        "where it defaults to every layer)",
    )
    p.add_argument("--eps", type=float, default=0.1, help="noise scale ε in h' = h + ε·σ(h)·N(0,1) (default 0.1)")
    p.add_argument("--grid", default=None, help="comma-separated ε values for a dose–response (replaces --eps)")
    p.add_argument("--seeds", type=int, default=3, help="how many seeds per ε (default 3)")
    p.add_argument("--seed", type=int, default=0, help="first seed (seeds are seed, seed+1, …)")
    p.add_argument("--sweep", action="store_true", help="noise one layer at a time at --eps: ΔZ per layer")
    p.add_argument("--patch", action="store_true", help="activation patching on --layers instead of noise")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    add_model_args(p)
    add_ray_args(p, "sweep's scoring runs (--sweep only)")
    p.set_defaults(max_new_tokens=16, func=run)


def _grid(args: argparse.Namespace) -> list[float]:
    if args.grid is None:
        return [float(args.eps)]
    try:
        values = [float(x) for x in args.grid.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--grid must be comma-separated numbers, got {args.grid!r}") from None
    if not values:
        raise ValueError("--grid is empty")
    if any(not 0 <= v <= MAX_EPS for v in values):
        raise ValueError(f"--grid values must be in [0, {MAX_EPS:g}], got {args.grid!r}")
    return values


def run(args: argparse.Namespace) -> int:
    if not 1 <= args.seeds <= MAX_RUNS:
        raise ValueError(f"--seeds must be in [1, {MAX_RUNS}], got {args.seeds}")
    if args.seed < 0:
        raise ValueError(f"--seed must be >= 0, got {args.seed}")
    if not 0 <= args.eps <= MAX_EPS:
        raise ValueError(f"--eps must be in [0, {MAX_EPS:g}], got {args.eps}")
    if args.patch and args.sweep:
        raise ValueError("--patch and --sweep are different experiments; choose one")
    if args.layers is None and not args.sweep:
        raise ValueError("--layers is required (e.g. 4-8, middle, or 1,3,5-7)")
    eps_grid = _grid(args)  # checked before the model is loaded
    settings = settings_from_args(args)
    seeds = list(range(args.seed, args.seed + args.seeds))
    n_tokens = sweep_settings(settings, settings.max_new_tokens).max_new_tokens
    sweep = {
        "query": args.query,
        "context": args.context,
        "settings": settings,
        "eps": args.eps,
        "seeds": seeds,
        "layers": args.layers,
        "max_new_tokens": n_tokens,
    }  # the single-layer sweep, here or on Ray
    if args.ray is not None:  # the sweep's runs on Ray actors (core.scale); same report plus "ray"
        swept = annotate_report(sweep_from_args(args, sweep))
        sys.stdout.write((json.dumps(swept, ensure_ascii=False, allow_nan=False) if args.json else _text(swept)) + "\n")
        return 0
    check_ray_args(args)
    handle = load_handle(args)

    report: dict[str, Any]
    if args.patch:
        report = patching_scores(handle, args.query, args.context, settings, args.layers, max_new_tokens=n_tokens)
    else:
        with tqdm(desc="scoring runs", unit="run", file=sys.stderr) as bar:

            def progress(done: int, total: int, label: str) -> None:
                bar.total = total
                bar.set_postfix_str(label)
                bar.update(done - bar.n)

            if args.sweep:
                grid = layer_sweep(handle, progress=progress, **sweep)
            else:
                grid = dose_response(
                    handle,
                    args.query,
                    args.context,
                    settings,
                    args.layers,
                    eps_grid,
                    seeds,
                    max_new_tokens=n_tokens,
                    progress=progress,
                )
        report = grid.to_dict()
    annotate_report(report)  # flag gibberish / repetition loops next to each score (degenerate.py)
    if args.json:
        sys.stdout.write(json.dumps(report, ensure_ascii=False, allow_nan=False) + "\n")
        return 0
    sys.stdout.write(_text(report) + "\n")
    return 0


def _text(report: dict[str, Any]) -> str:
    clean = report["clean"]
    lines = [
        f"model:        {report['model']}",
        f"clean answer: {clean['answer']}",
        f"clean Z:      {clean['z']:.4f} nats",
    ]
    if report["kind"] == "patching":
        lines.append(
            f"patched layers {report['layers_spec']}: Z = {report['patched']['z']:.4f} nats "
            f"(ΔZ = {report['delta_z']:+.4f}); answer: {report['patched']['answer']}"
        )
        return "\n".join(lines)
    lines.append(f"log p(first clean token {clean['first_token']!r}) = {clean['first_token_logprob']:.3f}")
    label = "ε" if report["kind"] == "dose_response" else "layer"
    lines.append(f"{label:>6}  {'Z mean':>9}  {'± sd':>8}  {'ΔZ':>9}  {'log p':>8}  answers changed")
    for i, cond in enumerate(report["conditions"]):
        changed = sum(report["answer_changed"][i])
        lines.append(
            f"{cond:>6g}  {report['z_mean'][i]:9.4f}  {report['z_std'][i]:8.4f}  {report['delta_z_mean'][i]:+9.4f}  "
            f"{report['first_token_logprob_mean'][i]:8.3f}  {changed}/{len(report['seeds'])}"
        )
    for i, count in enumerate(report.get("degenerate_count", [])):
        if count:
            lines.append(
                f"{label} {report['conditions'][i]:g}: {count} of {len(report['seeds'])} answers are degenerate "
                "(gibberish or repetition): their Z is not a finding"
            )
    if report["kind"] == "dose_response":
        lines.append(f"layers {report['layers_spec']}, seeds {report['seeds']}")
    else:
        lines.append(f"ε = {report['eps'][0]:g}, seeds {report['seeds']}")
    return "\n".join(lines)
