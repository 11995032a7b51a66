"""``python -m core run --json --all-detectors`` (issue 14): every cheap detector's verdict under a ``detectors``
key; the plain JSON keeps its pinned keys."""

from __future__ import annotations

import json

import core.cli.common
from core.cli import main
from core.detectors.agreement import cheap_detectors

Q, C = "Where is the tower?", "The tower stands in Quillmere."


def test_run_json_all_detectors_returns_the_same_under_a_detectors_key(tiny_handle, monkeypatch, capsys) -> None:
    monkeypatch.setattr(core.cli.common, "load_model", lambda *a, **k: tiny_handle)
    argv = ["run", "--query", Q, "--context", C, "--max-new-tokens", "4", "--json", "--all-detectors"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert list(data["detectors"]) == [d.name for d in cheap_detectors()]
    for entry in data["detectors"].values():
        assert {"score", "threshold", "verdict", "source"} <= set(entry)
        assert entry["verdict"] in ("recalled", "read", "inconclusive", "uncalibrated", "recall-type", "reasoning-type")
    assert data["detectors"]["radar"]["verdict"] not in ("recalled", "read"), "RADAR keeps its own words"
    assert data["detectors"]["repcs"]["score"] == data["repcs_score"]
    assert data["detectors"]["repcs"]["threshold"] == data["threshold"]
    assert {"selfcritique", "sma"} <= set(data["detectors_not_run"])
    assert data["detectors_summary"]

    assert main(["run", "--query", Q, "--context", C, "--max-new-tokens", "4", "--json"]) == 0
    assert "detectors" not in json.loads(capsys.readouterr().out), "the plain JSON keeps its pinned keys"
