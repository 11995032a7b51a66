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
