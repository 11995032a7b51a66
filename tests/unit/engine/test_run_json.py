"""``python -m core run --json``: the exact set of keys users rely on (schema 1's keys, schema_version and
schema 3's verdict keys; keys are only ever added)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import core.cli.common
from core.cli import main
from core.engine import SCHEMA_VERSION

# The pinned lists live in a data file so that they are written out once, independently of result.py.
_PINNED = json.loads((Path(__file__).with_name("run_json_keys.json")).read_text(encoding="utf-8"))
RUN_JSON_KEYS: list[str] = _PINNED["run_json_keys"]
SETTINGS_KEYS: list[str] = _PINNED["settings_keys"]


@pytest.fixture
def run_json(tiny_handle, monkeypatch, capsys):
    monkeypatch.setattr(core.cli.common, "load_model", lambda *a, **k: tiny_handle)
    argv = [
        "run",
        "--query",
        "Where is the tower?",
        "--context",
        "The tower stands in Quillmere.",
        "--max-new-tokens",
        "4",
        "--json",
    ]
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_run_json_has_exactly_the_pinned_keys_in_order(run_json):
    assert len(RUN_JSON_KEYS) == len(set(RUN_JSON_KEYS)) == 51 and RUN_JSON_KEYS[-1] == "schema_version"
    assert list(run_json) == RUN_JSON_KEYS
    assert run_json["schema_version"] == SCHEMA_VERSION == 4
    headline = {"recalled", "read", "neither", "inconclusive", "uncalibrated"}
    assert run_json["verdict"] in headline and run_json["verdict_reason"]
    # the top-level verdict is the two-axis headline; RePCS' own verdict stays under repcs_verdict
    axes = run_json["axes"]
    assert axes["verdict"] == run_json["verdict"] and axes["reason"] == run_json["verdict_reason"]
    assert set(axes) >= {"context_reliance", "parametric_support", "title", "qualifier"}
    for name in ("context_reliance", "parametric_support"):
        assert set(axes[name]) >= {"score", "threshold", "band", "direction", "state"} and axes[name]["direction"]
    assert run_json["repcs_verdict"] in {"recalled", "read", "inconclusive", "uncalibrated"}
    assert run_json["n_scored"] == min(run_json["score_window"], len(run_json["answer_token_ids"]))
    assert list(run_json["settings"]) == SETTINGS_KEYS
    assert run_json["settings"]["max_new_tokens"] == 4 and run_json["score_window"] == 4


def test_run_text_summary(tiny_handle, monkeypatch, capsys):
    monkeypatch.setattr(core.cli.common, "load_model", lambda *a, **k: tiny_handle)
    assert main(["run", "--query", "Where?", "--context", "Here.", "--max-new-tokens", "3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("model:       tiny-random-llama") and "verdict:" in out


def test_bad_flags_are_an_error_line_not_a_traceback(tiny_handle, monkeypatch, capsys):
    monkeypatch.setattr(core.cli.common, "load_model", lambda *a, **k: tiny_handle)
    assert main(["run", "--query", "Where?", "--context", "Here.", "--top-k", "0"]) == 2
    assert capsys.readouterr().err.startswith("error: top_k must be between 1 and 100")
