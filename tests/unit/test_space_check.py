"""``scripts/space_check.py`` without a container runtime: the one-line skip, the build context (the committed
tree, its Dockerfile byte for byte, file times fixed) and where torch comes from. The build and the checks
themselves run with ``make space-check`` (outside the suite: a cold build takes minutes)."""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "space_check.py"


@pytest.fixture(scope="module")
def space_check():
    spec = importlib.util.spec_from_file_location("space_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_runtime_prints_one_skip_line_and_exits_0(space_check, monkeypatch, capsys, tmp_path) -> None:
    monkeypatch.setattr(space_check.shutil, "which", lambda name: None)
    monkeypatch.setattr(space_check, "OUT", tmp_path / "out")
    assert space_check.main([]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out == ["space-check skipped: no container runtime (podman is not on PATH)"]


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_the_build_context_is_the_committed_tree_with_fixed_file_times(space_check, tmp_path) -> None:
    if subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True).returncode != 0:
        pytest.skip("not a git checkout")
    tree = space_check.snapshot(tmp_path, worktree=False)
    committed = subprocess.run(["git", "show", "HEAD:Dockerfile"], cwd=ROOT, capture_output=True, check=True).stdout
    assert (tree / "Dockerfile").read_bytes() == committed, "the Dockerfile a Space builds, byte for byte"
    times = {int(p.stat().st_mtime) for p in [tree / "Dockerfile", tree / "requirements.txt", tree / "core"]}
    assert times == {space_check.FIXED_MTIME}
    assert not (tree / ".git").exists()
    assert space_check.snapshot(tmp_path, worktree=True) == ROOT


def test_torch_comes_from_the_build_argument_or_a_read_only_wheel_folder(space_check, tmp_path) -> None:
    by_index, line = space_check.torch_source(
        argparse.Namespace(torch_index_url="https://example.invalid/cpu", wheels=""), tmp_path
    )
    assert by_index == ["--build-arg", "TORCH_INDEX_URL=https://example.invalid/cpu"]
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    mounts, line = space_check.torch_source(argparse.Namespace(torch_index_url="", wheels=str(wheels)), tmp_path)
    assert f"{wheels}:{wheels}:ro" in mounts
    assert f"{tmp_path / 'pip.conf'}:/etc/pip.conf:ro" in mounts
    assert f"find-links = {wheels}" in (tmp_path / "pip.conf").read_text(encoding="utf-8")
    assert all(m == "-v" or m.endswith(":ro") for m in mounts), "every mount is read-only"
    none, line = space_check.torch_source(argparse.Namespace(torch_index_url="", wheels=str(tmp_path / "no")), tmp_path)
    assert none == [] and "default index" in line
