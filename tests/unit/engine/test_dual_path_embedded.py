"""Integration on the embedded SmolLM2-135M-Instruct (offline)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from core.engine import DualPathSettings, run_dual_path

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[3]
VELTRIA = ("What is the capital of Veltria?", "The capital of the Republic of Veltria is Marrowgate.")


def test_invented_fact_is_read_from_context(embedded_handle):
    res = run_dual_path(embedded_handle, *VELTRIA, DualPathSettings())  # the calibrated T = 64
    assert "Marrowgate" in res.retrieval.answer
    assert "Marrowgate" not in res.parametric.answer
    assert res.threshold is not None
    assert res.repcs_verdict == "read", (res.repcs_score, res.threshold, res.repcs_verdict_reason)
    # the KL spikes where the context supplies the invented name
    name_positions = [i for i, t in enumerate(res.answer_tokens) if t.strip() in {"Mar", "row", "gate"}]
    assert name_positions and res.token_kl[name_positions].max() == pytest.approx(res.token_kl.max())


def test_known_fact_scores_lower_than_invented_fact(embedded_handle):
    settings = DualPathSettings(max_new_tokens=24, score_window=24)
    known = run_dual_path(
        embedded_handle, "What is the capital of France?", "Paris is the capital of France.", settings
    )
    invented = run_dual_path(embedded_handle, *VELTRIA, settings)
    assert "Paris" in known.parametric.answer and "Paris" in known.retrieval.answer
    assert known.repcs_score < invented.repcs_score
    assert np.all(known.token_kl >= 0)


def test_cli_run_json_contract():
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "core",
            "run",
            "--query",
            VELTRIA[0],
            "--context",
            VELTRIA[1],
            "--max-new-tokens",
            "16",
            "--json",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    for key in (
        "model",
        "query",
        "context",
        "rag_answer",
        "parametric_answer",
        "answer_tokens",
        "token_kl",
        "repcs_score",
        "threshold",
        "verdict",
    ):
        assert key in data, key
    assert data["verdict"] in {"recalled", "read", "inconclusive"}
    assert len(data["token_kl"]) == len(data["answer_tokens"])
    assert data["repcs_score"] == pytest.approx(sum(data["token_kl"][:16]), rel=1e-6)


def test_cli_reports_bad_input_without_traceback():
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "core", "run", "--query", "   ", "--context", "x", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and "query is empty" in proc.stderr and "Traceback" not in proc.stderr


def test_bundled_scores_reproduce(embedded_handle):
    """Spot-check that scripts/calibrate_threshold.py reproduces its per-prompt scores (3 rows per set)."""
    import csv

    scores = list(csv.DictReader((ROOT / "assets/thresholds/embedded_scores.csv").open(encoding="utf-8")))
    for name in ("clean", "memorized"):
        source = list(csv.DictReader((ROOT / f"assets/calibration/{name}.csv").open(encoding="utf-8")))
        rows = [r for r in scores if r["set"] == name]
        assert len(rows) == len(source)
        for r in rows[:3]:
            src = source[int(r["row"]) - 1]
            assert src["query"] == r["query"]
            res = run_dual_path(
                embedded_handle, src["query"], src["context"], DualPathSettings(), free_parametric=False
            )
            assert res.repcs_score == pytest.approx(float(r["z"]), rel=1e-3, abs=1e-3)
