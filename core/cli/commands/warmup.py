"""``python -m core warmup`` — convert the embedded model once to the local cache (``make run`` calls it)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from core.model.loading import ensure_embedded_cache


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("warmup", help="convert the embedded model once to the local cache")
    p.set_defaults(func=_cmd_warmup)


def _cmd_warmup(args: argparse.Namespace) -> int:
    path = ensure_embedded_cache()
    sys.stderr.write(f"embedded model ready at {path}\n")
    return 0
