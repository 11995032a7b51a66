"""What every ``python -m core`` command shares: the model/settings flags, and the one way to load the model.

A command adds the flags with :func:`add_model_args` and turns them into objects with
:func:`settings_from_args`, :func:`threshold_from_args` and :func:`load_handle` (or :func:`run_from_args`,
which does all three and runs the dual path once; :func:`write_result` prints it). Tests replace the model
by patching :func:`load_model` in this module (the one seam), e.g.
``monkeypatch.setattr(core.cli.common, "load_model", lambda *a, **k: tiny_handle)``.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from tqdm import tqdm

from core.engine import DualPathResult, DualPathSettings, run_dual_path
from core.methods.repcs import Threshold
from core.model.handle import ModelHandle
from core.model.loading import load_model
from core.model.prompts import TEMPLATE_CHOICES

DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
"""The ``--dtype`` choices."""


def parse_device(text: str) -> str:
    """The ``--device`` value: ``cpu``, ``cuda`` or ``cuda:N``.

    Raises:
        argparse.ArgumentTypeError: any other text (argparse turns it into a usage error).
    """
    device = text.strip().lower()
    if not re.fullmatch(r"cpu|cuda(:\d+)?", device):
        raise argparse.ArgumentTypeError(f"device must be cpu, cuda or cuda:N (e.g. cuda:0), got {text!r}")
    return device


def add_model_args(p: argparse.ArgumentParser) -> None:
    """``--model``, ``--revision``, ``--device``, ``--dtype``, the :class:`DualPathSettings` flags and
    ``--threshold-file``."""
    p.add_argument("--model", default=None, help="hub id or local folder (default: the embedded SmolLM2)")
    p.add_argument("--revision", default=None, help="hub revision (branch, tag or commit)")
    p.add_argument(
        "--device", type=parse_device, default=None, help="cpu, cuda or cuda:N (default: CUDA when available)"
    )
    p.add_argument(
        "--dtype", choices=list(DTYPES), default=None, help="weights' dtype (default: float16 on CUDA, float32 on CPU)"
    )
    p.add_argument("--max-new-tokens", type=int, default=64, help="most answer tokens per path (default 64)")
    p.add_argument(
        "--window", type=int, default=None, help="RePCS T: answer tokens summed into Z (default = max new tokens)"
    )
    p.add_argument("--template", default="auto", choices=TEMPLATE_CHOICES)
    p.add_argument("--top-k", type=int, default=10)
    p.add_argument(
        "--threshold-file", default=None, help="JSON file with a calibrated τ (see `calibrate --write-threshold`)"
    )


def settings_from_args(args: argparse.Namespace) -> DualPathSettings:
    """The validated :class:`DualPathSettings` of the flags (``--window`` defaults to ``--max-new-tokens``).

    Raises:
        ValueError: a value out of range (the message names it).
    """
    settings = DualPathSettings(
        max_new_tokens=args.max_new_tokens,
        score_window=args.window or args.max_new_tokens,
        top_k=args.top_k,
        template=args.template,
    )
    settings.validate()
    return settings


def threshold_from_args(args: argparse.Namespace) -> tuple[Threshold | None, str | None]:
    """The τ of ``--threshold-file`` and a sentence saying where it came from, or ``(None, None)``.

    Raises:
        ValueError: the file cannot be read or is not a valid threshold.
    """
    if not args.threshold_file:
        return None, None
    return Threshold.load(args.threshold_file), f"from {args.threshold_file}"


def load_handle(args: argparse.Namespace) -> ModelHandle:
    """The model of ``--model`` / ``--revision`` on ``--device`` in ``--dtype`` (defaults: the embedded model,
    CUDA when available, float16 on CUDA and float32 on CPU). Every command loads it here.

    Raises:
        core.model.handle.ModelLoadError: the model cannot be loaded (the message says why).
    """
    dtype = DTYPES[args.dtype] if args.dtype else None
    return load_model(args.model, revision=args.revision, device=args.device, dtype=dtype)


def run_from_args(args: argparse.Namespace, settings: DualPathSettings) -> tuple[ModelHandle, DualPathResult]:
    """Load the model and run the dual path once on ``--query`` / ``--context`` (τ from ``--threshold-file``).

    Raises:
        ValueError: bad input or threshold file; core.model.handle.ModelLoadError: see :func:`load_handle`.
    """
    threshold, source = threshold_from_args(args)
    handle = load_handle(args)
    result = run_dual_path(handle, args.query, args.context, settings, threshold=threshold, threshold_source=source)
    return handle, result


def write_result(result: DualPathResult, as_json: bool, details: list[str]) -> int:
    """Print ``result`` as one JSON object, or as a text summary (model, both answers, then ``details``).

    Returns:
        0, the command's exit status.
    """
    if as_json:
        sys.stdout.write(result.to_json() + "\n")
        return 0
    lines = [
        f"model:       {result.model}",
        f"retrieval:   {result.retrieval.answer}",
        f"parametric:  {result.parametric.answer}",
        *details,
    ]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


@contextmanager
def row_progress(total: int, desc: str = "scoring rows") -> Iterator[Callable[[int, int], None]]:
    """A progress bar on stderr; yields a ``progress(done, total)`` callback for the scoring functions."""
    with tqdm(total=total, desc=desc, unit="row", file=sys.stderr) as bar:
        yield lambda done, _total: bar.update(done - bar.n)
