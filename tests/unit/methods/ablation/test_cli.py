"""``python -m core ablate`` on the tiny random Llama."""

from __future__ import annotations

import json

from core.cli import main

Q, C = "Where is the tower?", "The tower stands in Quillmere."


def test_cli_ablate_noise_sweep_and_patch(cli_model, capsys):
    common = ["ablate", "--query", Q, "--context", C, "--max-new-tokens", "4"]
    assert main([*common, "--layers", "1-2", "--eps", "0.5", "--seeds", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kind"] == "dose_response" and out["layers"] == [1, 2] and out["eps"] == [0.5]
    assert out["seeds"] == [0, 1, 2] and len(out["z"][0]) == 3 and out["settings"]["score_window"] == 4
    assert main([*common, "--sweep", "--eps", "0.5", "--seeds", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kind"] == "layer_sweep" and out["conditions"] == [0, 1, 2]
    assert main([*common, "--layers", "late", "--patch", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kind"] == "patching" and out["layers"] == [2]
    assert main([*common, "--layers", "middle", "--grid", "0,1", "--seeds", "2"]) == 0
    text = capsys.readouterr().out
    assert "clean Z" in text and "Z mean" in text
    assert main([*common, "--layers", "7"]) == 2
    assert "out of range" in capsys.readouterr().err
    assert main([*common, "--layers", "0-100000000"]) == 2  # refused before expanding (issue 17 item 1)
    err = capsys.readouterr().err
    assert "out of range" in err and len(err) < 400
    assert main([*common, "--layers", "1", "--seeds", "100000000"]) == 2  # refused before building the list
    assert "--seeds" in capsys.readouterr().err
    assert main([*common]) == 2
    assert "--layers is required" in capsys.readouterr().err
