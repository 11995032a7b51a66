"""core.cli.common: the --device / --dtype flags and how load_handle forwards them to load_model."""

from __future__ import annotations

import argparse

import pytest
import torch

import core.cli.common
from core.cli.common import add_model_args, load_handle


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_model_args(parser)
    return parser.parse_args(list(argv))


def test_device_and_dtype_default_to_none_so_load_model_picks():
    args = _parse()
    assert args.device is None and args.dtype is None


@pytest.mark.parametrize(
    ("given", "parsed"), [("cpu", "cpu"), ("cuda", "cuda"), ("cuda:1", "cuda:1"), ("CUDA:0", "cuda:0")]
)
def test_device_accepts_cpu_cuda_and_cuda_n(given, parsed):
    assert _parse("--device", given).device == parsed


@pytest.mark.parametrize("bad", ["gpu", "cuda:", "cuda:x", "mps", ""])
def test_device_rejects_anything_else(bad, capsys):
    with pytest.raises(SystemExit):
        _parse("--device", bad)
    assert "device must be cpu, cuda or cuda:N" in capsys.readouterr().err


def test_dtype_choices():
    assert _parse("--dtype", "bfloat16").dtype == "bfloat16"
    with pytest.raises(SystemExit):
        _parse("--dtype", "int8")


@pytest.mark.parametrize(
    ("argv", "device", "dtype"),
    [
        ((), None, None),
        (("--device", "cpu", "--dtype", "float32"), "cpu", torch.float32),
        (("--device", "cuda:0", "--dtype", "float16"), "cuda:0", torch.float16),
        (("--dtype", "bfloat16"), None, torch.bfloat16),
    ],
)
def test_load_handle_forwards_model_revision_device_and_dtype(monkeypatch, argv, device, dtype):
    calls = []
    monkeypatch.setattr(core.cli.common, "load_model", lambda *a, **k: calls.append((a, k)) or "handle")
    args = _parse("--model", "owner/name", "--revision", "v1", *argv)
    assert load_handle(args) == "handle"
    assert calls == [(("owner/name",), {"revision": "v1", "device": device, "dtype": dtype})]


def _threshold_file(tmp_path, **fields):
    import json

    path = tmp_path / "tau.json"
    path.write_text(json.dumps({"tau": 4.0, "T": 8, "model": "tiny-random-llama", **fields}), encoding="utf-8")
    return str(path)


def test_a_threshold_file_of_another_model_is_refused_once_the_model_is_loaded(monkeypatch, tmp_path, tiny_handle):
    """Issue 25 item 6: the CLI applied another model's τ without a word (the app refuses it)."""
    monkeypatch.setattr(core.cli.common, "load_model", lambda *a, **k: tiny_handle)
    args = _parse("--threshold-file", _threshold_file(tmp_path, model="SmolLM2 something else"))
    with pytest.raises(ValueError, match=r"calibrated for SmolLM2 something else, not for the loaded model"):
        load_handle(args)
    own = _parse("--threshold-file", _threshold_file(tmp_path))
    assert load_handle(own) is tiny_handle
    threshold, source = core.cli.common.threshold_from_args(own, tiny_handle.info.name)
    assert threshold.tau == 4.0 and source == f"from {own.threshold_file}"


def test_run_refuses_another_models_tau_before_scoring(monkeypatch, tmp_path, tiny_handle):
    from core.cli.common import run_from_args, settings_from_args

    monkeypatch.setattr(core.cli.common, "load_model", lambda *a, **k: tiny_handle)
    args = _parse("--threshold-file", _threshold_file(tmp_path, model="another/model"), "--max-new-tokens", "4")
    args.query, args.context = "Who?", "Ada."
    monkeypatch.setattr(core.cli.common, "run_dual_path", lambda *a, **k: pytest.fail("scored with a foreign τ"))
    with pytest.raises(ValueError, match="calibrated for another/model"):
        run_from_args(args, settings_from_args(args))


@pytest.mark.parametrize("tau", [-1.0, 0.0])
def test_a_threshold_file_with_a_tau_that_is_not_positive_is_refused(tmp_path, tau):
    args = _parse("--threshold-file", _threshold_file(tmp_path, tau=tau))
    with pytest.raises(ValueError, match="'tau' must be a positive number of nats"):
        core.cli.common.threshold_from_args(args)


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ({"intercept": -800.0}, "τ would be 0"),  # before: the verdict "read", exit 0
        ({"intercept": 800.0}, "overflow to infinity"),  # before: `unexpected OverflowError`
        (None, "levels deep"),  # 5,000 levels deep; before: `unexpected RecursionError`
    ],
)
def test_run_refuses_a_threshold_file_whose_tau_is_not_finite_and_positive(cli_model, tmp_path, patch, message, capsys):
    """Issue 37 C: the length-aware default bypassed the τ > 0 check; such files are refused before any run."""
    import json

    from core.cli import main
    from core.engine.threshold import EMBEDDED_THRESHOLD

    data = json.loads(EMBEDDED_THRESHOLD.read_text(encoding="utf-8"))
    data["model"] = cli_model.info.name
    path = tmp_path / "tau.json"
    if patch is None:
        path.write_text('{"tau": 1, "T": 4, "model": "m", "extra": ' + "[" * 5000 + "]" * 5000 + "}")
    else:
        data["length_tau"].update(patch)
        path.write_text(json.dumps(data), encoding="utf-8")
    argv = ["run", "--query", "Who?", "--context", "Ada.", "--max-new-tokens", "2", "--threshold-file", str(path)]
    assert main([*argv, "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and message in captured.err and "unexpected" not in captured.err
    assert captured.err.startswith("error: Threshold file")
