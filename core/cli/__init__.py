"""``python -m core …`` — everything that is not interactive.

Commands:
    run       one dual-path analysis (``--json`` prints the DualPathResult JSON)
    evaluate  score a labelled CSV with the detectors and write metrics JSON
    warmup    convert/cache the embedded model once (used by ``make run``)
"""

from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys
from collections.abc import Sequence

import core.cli.commands

from core.engine.dual_path import DualPathSettings, run_dual_path
from core.model.loading import ModelLoadError, ensure_embedded_cache, load_model
from core.model.prompts import TEMPLATE_CHOICES
from core.methods.repcs import Threshold

logger = logging.getLogger("core")


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, help="hub id or local folder (default: the embedded SmolLM2)")
    p.add_argument("--revision", default=None, help="hub revision (branch, tag or commit)")
    p.add_argument("--max-new-tokens", type=int, default=64, help="most answer tokens per path (default 64)")
    p.add_argument("--window", type=int, default=None, help="RePCS T: answer tokens summed into Z (default = max new tokens)")
    p.add_argument("--template", default="auto", choices=TEMPLATE_CHOICES)
    p.add_argument("--top-k", type=int, default=10)
    p.add_argument("--threshold-file", default=None, help="JSON file with a calibrated τ (see `calibrate --write-threshold`)")


def settings_from_args(args: argparse.Namespace) -> DualPathSettings:
    settings = DualPathSettings(
        max_new_tokens=args.max_new_tokens,
        score_window=args.window or args.max_new_tokens,
        top_k=args.top_k,
        template=args.template,
    )
    settings.validate()
    return settings


def threshold_from_args(args: argparse.Namespace) -> tuple[Threshold | None, str | None]:
    if not args.threshold_file:
        return None, None
    return Threshold.load(args.threshold_file), f"from {args.threshold_file}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m core", description="Read or Recall — did the model read the context or recall from memory?")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="analyse one query + context on both paths")
    run.add_argument("--query", required=True)
    run.add_argument("--context", required=True)
    run.add_argument("--json", action="store_true", help="print the whole result as one JSON object")
    add_model_args(run)

    ev = sub.add_parser("evaluate", help="score a labelled CSV (query,context,label) and write metrics JSON")
    ev.add_argument("data", help="CSV with columns query, context, label (memorized|grounded)")
    ev.add_argument("--out", required=True, help="where to write the result JSON")
    ev.add_argument("--detectors", default="repcs",
                    help="comma-separated detector names (min_k_<k> / min_kpp_<k> for any k in 1..100), 'all', or "
                         "'cheap' (every detector that needs no extra generation) (default: repcs)")
    ev.add_argument("--batch-size", type=int, default=8, help="rows generated together in one padded batch (default 8)")
    ev.add_argument("--sigmas", default="0,0.02,0.05,0.1",
                    help="logit-noise σ values for the RePCS Table IV robustness table ('' to skip)")
    ev.add_argument("--sample", type=int, default=None, metavar="N",
                    help="score a stratified sample of N rows (label proportions kept, seed 42) instead of all")
    ev.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for the AUC 95%% CI (default 1000)")
    add_model_args(ev)
    ev.set_defaults(max_new_tokens=32)

    sub.add_parser("warmup", help="convert the embedded model once to the local cache")
    for info in sorted(pkgutil.iter_modules(core.cli.commands.__path__), key=lambda m: m.name):
        importlib.import_module(f"core.cli.commands.{info.name}").register(sub)
    return parser


def _cmd_run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    threshold, source = threshold_from_args(args)
    handle = load_model(args.model, revision=args.revision)
    result = run_dual_path(handle, args.query, args.context, settings, threshold=threshold, threshold_source=source)
    if args.json:
        sys.stdout.write(result.to_json() + "\n")
        return 0
    lines = [
        f"model:       {result.model}",
        f"retrieval:   {result.retrieval.answer}",
        f"parametric:  {result.parametric.answer}",
        f"Z (T={result.score_window}): {result.repcs_score:.4f} nats   τ = {result.threshold}",
        f"verdict:     {result.verdict}  ({result.threshold_source})",
    ]
    lines += [f"warning:     {w}" for w in result.warnings]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from core.evaluation.evaluate import evaluate_rows, read_labelled_csv, write_json_atomic

    from core.detectors.registry import available

    from core.evaluation.evaluate import stratified_sample

    rows = read_labelled_csv(args.data)
    if args.sample is not None:
        if args.sample < 1:
            raise ValueError("--sample must be at least 1")
        rows = stratified_sample(rows, args.sample)
    registry = available()
    if args.detectors == "all":
        names = list(registry)
    elif args.detectors == "cheap":
        names = [n for n, d in registry.items() if d.cost in ("free", "forward")]
    else:
        names = [d.strip() for d in args.detectors.split(",") if d.strip()]
    try:
        sigmas = [float(s) for s in args.sigmas.split(",") if s.strip()]
    except ValueError:
        raise ValueError(f"--sigmas must be comma-separated numbers, got {args.sigmas!r}") from None
    if args.batch_size < 1 or args.bootstrap < 1:
        raise ValueError("--batch-size and --bootstrap must be at least 1")
    settings = settings_from_args(args)
    threshold, _ = threshold_from_args(args)
    handle = load_model(args.model, revision=args.revision)
    with tqdm(total=len(rows), desc="scoring rows", unit="row", file=sys.stderr) as bar:
        report = evaluate_rows(
            handle, rows, settings, threshold=threshold, detectors=names, batch_size=args.batch_size,
            noise_sigmas=sigmas, n_boot=args.bootstrap, progress=lambda done, total: bar.update(done - bar.n),
        )
    write_json_atomic(args.out, report)

    def num(value: float | None, spec: str) -> str:
        return "n/a" if value is None else format(value, spec)

    for name, m in report["detectors"].items():
        ci = m.get("auc_ci") or [None, None]
        line = (
            f"{name:16s} AUC={num(m['auc'], '.3f')} [{num(ci[0], '.3f')}, {num(ci[1], '.3f')}]"
            f"  FPR@95%TPR={num(m['fpr_at_95tpr'], '.3f')}  P@10={num(m['precision_at_10'], '.2f')}  n={m['n']}"
        )
        if m.get("note"):
            line += f"  ({m['note']})"
        sys.stderr.write(line + "\n")
    sys.stderr.write(f"n={report['n']} → {args.out}\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "run":
            return _cmd_run(args)
        if args.command == "evaluate":
            return _cmd_evaluate(args)
        if args.command == "warmup":
            path = ensure_embedded_cache()
            sys.stderr.write(f"embedded model ready at {path}\n")
            return 0
        if hasattr(args, "func"):
            return int(args.func(args))
    except (ValueError, ModelLoadError) as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    parser.error(f"unknown command {args.command}")
    return 2
