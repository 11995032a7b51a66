"""The bundled data sets keep passing their own file checks (no model run): headers, no empty cells, the
expected answer verbatim in each context, no query shared with the calibration sets or the examples, and
probes.csv is probes_source.csv plus the behavioral column."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("script", ["scripts/build_probes.py", "scripts/check_sets.py"])
def test_static_checks_pass(script):
    proc = subprocess.run(
        [sys.executable, script, "--static-only"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "file checks passed" in proc.stdout


def test_probes_are_the_source_plus_a_behavioral_column():
    def rows(name):
        with (ROOT / "assets" / "probes" / name).open(encoding="utf-8", newline="") as fh:
            return list(csv.DictReader(fh))

    source, built = rows("probes_source.csv"), rows("probes.csv")
    assert len(built) == len(source) >= 200
    assert all({k: b[k] for k in s} == s for s, b in zip(source, built))
    assert {b["parametric_correct"] for b in built} <= {"true", "false"}
    labels = [b["label"] for b in built]
    assert 0.4 <= labels.count("memorized") / len(labels) <= 0.6
