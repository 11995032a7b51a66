"""``python -m core detect`` — one dual-path run scored by chosen detectors.

Example::

    python -m core detect --query "What is the capital of Veltria?" \\
        --context "The capital of Veltria is Marrowgate." --detectors selfcritique,sma --json

prints the :class:`~core.engine.result.DualPathResult` JSON (the same as ``python -m core run --json``) with
``extras["detectors"][name] = {"score", "label", "higher_means", "cost", "source", "seconds", "details"}``;
``details`` is what the detector's declaration says it leaves (``Detector.details``: Self-Critique's both answers and
entropy sequences; SMA's units, β with retrieval on and off, ADS and labels; ``null`` for a detector that leaves
none). Without ``--json`` a short text summary is printed.
"""

from __future__ import annotations

import argparse
import logging
import time
from typing import Any

from core.cli.common import add_model_args, run_from_args, settings_from_args, write_result
from core.detectors import DetectorInput, available, get, keys, resolve
from core.methods.selfcritique import K_CHOICES, SelfCritiqueSettings
from core.methods.sma import SMASettings
from core.methods.sma.settings import sma_setting_specs
from core.scale.options import add_ray_args, check_ray_args, sma_report, sma_runner_from_args

logger = logging.getLogger(__name__)


def add_sma_args(p: argparse.ArgumentParser) -> None:
    """The ``--sma-*`` flags of the SMA detector (also taken by ``bench/sma.py``), built from each
    :class:`~core.methods.sma.SMASettings` field's one definition (its default, choices and words)."""
    defaults = SMASettings()
    for name, spec in sma_setting_specs().items():
        if spec.flag is None:
            continue
        default = getattr(defaults, name)
        kind = None if spec.choices is not None else type(default)
        p.add_argument(
            spec.flag, type=kind, choices=spec.choices, default=default, help=f"SMA: {spec.help} (default {default})"
        )


def sma_settings_from_args(args: argparse.Namespace, **extra: Any) -> SMASettings:
    """The checked :class:`SMASettings` of the :func:`add_sma_args` flags and ``extra`` fields.

    Raises:
        ValueError: a setting out of its bounds.
    """
    flagged = {name: getattr(args, spec.dest) for name, spec in sma_setting_specs().items() if spec.dest}
    settings = SMASettings(**flagged, **extra)
    settings.validate()
    return settings


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("detect", help="one dual-path run scored by chosen detectors (e.g. selfcritique,sma)")
    p.add_argument("--query", required=True)
    p.add_argument("--context", required=True)
    p.add_argument("--detectors", default="selfcritique,sma", help="comma-separated detector names, or 'all'")
    p.add_argument("--json", action="store_true", help="print the whole result (detectors under extras) as JSON")
    add_sma_args(p)
    p.add_argument(
        "--selfcritique-k",
        default="50",
        help=f"Self-Critique: top-K of the entropy, one of {', '.join(str(k) for k in K_CHOICES if k)} or 'full'",
    )
    p.add_argument(
        "--selfcritique-context",
        action="store_true",
        help="Self-Critique: answer with the context (default: without, as in the paper)",
    )
    add_model_args(p)
    add_ray_args(p, "SMA detector's perturbed generations")
    p.set_defaults(func=_cmd_detect)


def _parse_k(text: str) -> int | None:
    if text.strip().lower() in {"full", "none", "all"}:
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"--selfcritique-k must be a number or 'full', got {text!r}") from None


def _cmd_detect(args: argparse.Namespace) -> int:
    names = (
        list(available()) if args.detectors == "all" else [d.strip() for d in args.detectors.split(",") if d.strip()]
    )
    resolve(names)
    settings = settings_from_args(args)
    sc_settings = SelfCritiqueSettings(
        max_new_tokens=settings.max_new_tokens,
        top_k=_parse_k(args.selfcritique_k),
        use_context=args.selfcritique_context,
        template=settings.template,
    )
    sc_settings.validate()
    sma_settings = sma_settings_from_args(args, template=settings.template)
    check_ray_args(args)
    runner = sma_runner_from_args(args) if args.ray is not None else None  # before the model: a bad address fails fast
    handle, result = run_from_args(args, settings)
    inp = DetectorInput(
        handle=handle,
        result=result,
        settings=settings,
        cache={keys.SELFCRITIQUE_SETTINGS: sc_settings, keys.SMA_SETTINGS: sma_settings},
    )
    if runner is not None:  # SMA's generations on Ray actors (core.scale.ray_sma)
        inp.cache[keys.SMA_RUNNER] = runner
    outputs: dict[str, dict[str, Any]] = {}
    for name in names:
        detector = get(name)
        if detector.cost == "heavy":
            logger.info("running %s (many generations; this takes a while)", name)
        t0 = time.perf_counter()
        score = float(detector.score(inp))
        outputs[name] = {
            "score": score,
            "label": detector.label,
            "higher_means": detector.higher_means,
            "cost": detector.cost,
            "source": detector.source,
            "seconds": time.perf_counter() - t0,
            "details": None if detector.details is None else detector.details.of(inp),
        }
    result.extras["detectors"] = outputs
    if runner is not None:
        result.extras["ray"] = sma_report(runner)
    details = [f"Z (T={result.score_window}): {result.repcs_score:.4f} nats   RePCS verdict: {result.repcs_verdict}"]
    details += [
        f"{name:14s} {out['score']:.4f}   ({out['label']}; higher = {out['higher_means']}; {out['seconds']:.1f} s)"
        for name, out in outputs.items()
    ]
    return write_result(result, args.json, details)
