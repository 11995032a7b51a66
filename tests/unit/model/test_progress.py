"""core.model.progress: one progress protocol, ``progress(done, total, text="")``, for every long run."""

from __future__ import annotations

import ast
import io
import sys
from pathlib import Path

import pytest

from core.cli.common import row_progress
from core.scale.options import progress_bar

CORE = Path(__file__).resolve().parents[3] / "core"
PROGRESS_PARAMETERS = {"progress", "on_progress", "on_detector"}


def _progress_parameters() -> list[tuple[str, str, str]]:
    """``(file, function, annotation)`` of every parameter of a core function that takes a progress callback."""
    found = []
    for path in sorted(CORE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            args = node.args
            for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
                if arg.arg in PROGRESS_PARAMETERS and arg.annotation is not None:
                    found.append((str(path.relative_to(CORE.parent)), node.name, ast.unparse(arg.annotation)))
    return found


def test_every_progress_parameter_in_core_is_the_one_progress_type():
    params = _progress_parameters()
    assert len(params) >= 15, "the scan finds the runs that report progress"
    others = [p for p in params if p[2] not in ("Progress | None", "Progress")]
    assert others == [], f"use core.model.progress.Progress: {others}"


def test_no_module_defines_its_own_progress_alias():
    aliases = []
    for path in sorted(CORE.rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            targets = [t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                targets.append(node.target.id)
            aliases += [(path.name, name) for name in targets if name in ("Progress", "ProgressCallback")]
    assert aliases == []


@pytest.mark.parametrize("make", [lambda: row_progress(4), lambda: progress_bar(4)])
def test_the_cli_bars_take_both_report_forms(make, monkeypatch):
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    with make() as progress:
        progress(1, 4)  # a run with nothing to say
        progress(3, 4, "retrieval path")  # a run that names its unit
    assert "3/4" in err.getvalue()
