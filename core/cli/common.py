"""What every ``python -m core`` command shares: the model/settings flags, and the one way to load the model.

A command adds the flags with :func:`add_model_args` and turns them into objects with
:func:`settings_from_args`, :func:`threshold_from_args` and :func:`load_handle`. Tests replace the model
by patching :func:`load_model` in this module (the one seam), e.g.
``monkeypatch.setattr(core.cli.common, "load_model", lambda *a, **k: tiny_handle)``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tqdm import tqdm

from core.engine import DualPathSettings
from core.methods.repcs import Threshold
from core.model.handle import ModelHandle
from core.model.loading import load_model
from core.model.prompts import TEMPLATE_CHOICES


def add_model_args(p: argparse.ArgumentParser) -> None:
    """``--model``, ``--revision``, the :class:`DualPathSettings` flags and ``--threshold-file``."""
    p.add_argument("--model", default=None, help="hub id or local folder (default: the embedded SmolLM2)")
    p.add_argument("--revision", default=None, help="hub revision (branch, tag or commit)")
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
    """The model of ``--model`` / ``--revision`` (default: the embedded one). Every command loads it here.

    Raises:
        core.model.handle.ModelLoadError: the model cannot be loaded (the message says why).
    """
    return load_model(args.model, revision=args.revision)


@contextmanager
def row_progress(total: int, desc: str = "scoring rows") -> Iterator[Callable[[int, int], None]]:
    """A progress bar on stderr; yields a ``progress(done, total)`` callback for the scoring functions."""
    with tqdm(total=total, desc=desc, unit="row", file=sys.stderr) as bar:
        yield lambda done, _total: bar.update(done - bar.n)
