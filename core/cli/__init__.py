"""``python -m core …`` — everything that is not interactive.

Every command is one module in :mod:`core.cli.commands` (``run``, ``evaluate``, ``warmup``, ``calibrate``,
``detect``, ``probe``, ``ablate`` …), discovered here: a new command is a new file there and nothing else
changes. Each module defines ``register(subparsers) -> None``, which adds its parser and sets
``func=<callable(args) -> int>`` with ``parser.set_defaults``. Flags and helpers shared by commands (the model
and settings flags, and :func:`core.cli.common.load_handle`, the one way a command loads the model) live in
:mod:`core.cli.common`.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys
from collections.abc import Sequence

import core.cli.commands
from core.cli.common import check_args
from core.model.handle import ModelLoadError


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m core`` parser with every command of :mod:`core.cli.commands`, in name order."""
    parser = argparse.ArgumentParser(
        prog="python -m core", description="Read or Recall — did the model read the context or recall from memory?"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    sub = parser.add_subparsers(dest="command", required=True)
    for info in sorted(pkgutil.iter_modules(core.cli.commands.__path__), key=lambda m: m.name):
        importlib.import_module(f"core.cli.commands.{info.name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns its exit status (2 with a one-line ``error:`` on stderr for bad input)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        check_args(args)
        return int(args.func(args))
    except (ValueError, ModelLoadError) as exc:
        sys.stderr.write(f"error: {_one_line(exc)}\n")
        return 2
    except OSError as exc:  # a file that vanished or a disk that filled up while the command ran
        sys.stderr.write(f"error: {_one_line(exc)}\n")
        return 2
    except Exception as exc:  # anything else: one line, the traceback only with --verbose
        if args.verbose:
            logging.getLogger(__name__).exception("unexpected failure")
        hint = "" if args.verbose else " (run with -v for the traceback)"
        sys.stderr.write(f"error: unexpected {type(exc).__name__}: {_one_line(exc)}{hint}\n")
        return 2


def _one_line(exc: BaseException) -> str:
    """An exception's message on one line (newlines folded), at most 2,000 characters."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 2000 else text[:1999] + "…"
