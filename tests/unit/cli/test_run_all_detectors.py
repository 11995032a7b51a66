"""``python -m core run --json --all-detectors`` (issue 14): every cheap detector's verdict under a ``detectors``
key, group by group with each entry's group and direction (issue 23 part 3); the plain JSON keeps its pinned
keys."""

from __future__ import annotations

import json

import core.cli.common
from core.cli import main
from core.detectors.agreement import cheap_detectors
from core.detectors.registry import GROUPS

Q, C = "Where is the tower?", "The tower stands in Quillmere."


def test_run_json_all_detectors_returns_the_same_under_a_detectors_key(tiny_handle, monkeypatch, capsys) -> None:
    monkeypatch.setattr(core.cli.common, "load_model", lambda *a, **k: tiny_handle)
    argv = ["run", "--query", Q, "--context", C, "--max-new-tokens", "4", "--json", "--all-detectors"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert list(data["detectors"]) == [d.name for d in cheap_detectors()]
    for entry in data["detectors"].values():
        assert {"score", "threshold", "verdict", "source", "group", "direction", "says", "finding"} <= set(entry)
        assert entry["group"] in GROUPS and entry["direction"].startswith("higher = ")
        assert entry["verdict"] in ("recalled", "read", "inconclusive", "uncalibrated", "recall-type", "reasoning-type")
    assert data["detectors"]["radar"]["verdict"] not in ("recalled", "read"), "RADAR keeps its own words"
    assert data["detectors"]["repcs"]["score"] == data["repcs_score"]
    assert data["detectors"]["repcs"]["threshold"] == data["threshold"]
    assert {"selfcritique", "sma"} <= set(data["detectors_not_run"])
    assert data["detectors_summary"] and "They conflict" not in data["detectors_summary"]
    groups = data["detector_groups"]
    assert [g["group"] for g in groups] == [g for g in GROUPS if g in {x["group"] for x in groups}], "GROUPS order"
    assert all(g["question"] == GROUPS[g["group"]] and g["summary"].startswith(g["title"]) for g in groups)
    assert [g["group"] for g in groups if g["feeds_headline"]] == ["context_reliance", "parametric_knowledge"]
    assert data["detectors_not_run"]["selfcritique"]["group"] == "parametric_knowledge"
    by_group = {g["group"]: g for g in groups}
    assert by_group["context_reliance"]["headline_axis"] == data["axes"]["context_reliance"], "the headline's axis 1"
    assert by_group["parametric_knowledge"]["headline_axis"] == data["axes"]["parametric_support"]

    assert main(["run", "--query", Q, "--context", C, "--max-new-tokens", "4", "--json"]) == 0
    assert "detectors" not in json.loads(capsys.readouterr().out), "the plain JSON keeps its pinned keys"


def test_run_all_detectors_as_text_groups_them_under_their_questions(tiny_handle, monkeypatch, capsys) -> None:
    monkeypatch.setattr(core.cli.common, "load_model", lambda *a, **k: tiny_handle)
    assert main(["run", "--query", Q, "--context", C, "--max-new-tokens", "4", "--all-detectors"]) == 0
    text = capsys.readouterr().out
    assert "  Familiarity of the context text — Does the context text look familiar to the model?" in text
    assert text.index("Context reliance —") < text.index("Familiarity of the context text —"), "GROUPS order"
    assert "higher = the context text looks less familiar to the model" in text, "every score's direction"
    assert "    Headline axis 1 (context reliance): " in text and "    Headline axis 2 (parametric support): " in text
    assert "They conflict" not in text and "They agree" not in text
