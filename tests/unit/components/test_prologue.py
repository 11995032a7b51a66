"""components.prologue (issue 27): the modules a page draws its inputs with, before its libraries, import nothing
heavy (tests/app/test_frame.py checks that the pages import only these before their inputs)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
COMPONENTS = ("frame", "prologue", "inputs", "state", "url_state", "controls", "keys", "text")
LIGHT = (
    *(f"components.{name}" for name in COMPONENTS),
    "core.audit.store",
    "core.audit.chain",
    "core.public",
    "core.bundled_sets",
)
"""The modules a page may import before its inputs are on screen (:mod:`components.prologue`)."""
HEAVY = ("torch", "transformers", "safetensors", "sklearn", "scipy", "captum", "pandas", "numpy", "core.engine")
"""Libraries that take seconds to import on a server's first run (plotly is not here: Streamlit imports it)."""


def _heavy_after(*imports: str) -> list[str]:
    """The heavy modules loaded in a fresh interpreter after ``import`` of each of ``imports``."""
    code = "".join(f"import {name}\n" for name in ("json", "sys", *imports)) + (
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r} or m in {HEAVY!r})))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_light_modules_import_no_heavy_library() -> None:
    assert _heavy_after(*LIGHT) == []
    assert {"torch", "core.engine"} <= set(_heavy_after("core.engine", *LIGHT)), "the check sees a heavy import"
