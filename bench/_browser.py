"""The app in a real browser, for the benchmarks and the browser tests: one server helper, one chromium setup.

* :func:`start_server` — a fresh ``streamlit run app.py`` of a checkout on a free port, healthy or an error
  (:class:`ServerError`, with the log's path);
* :func:`stop_server` — terminate it (kill when it does not stop);
* :func:`chromium` / :data:`CHROMIUM_ARGS` — Debian's chromium, driven by Playwright (which cannot download its
  own browsers here);
* :data:`IDLE` — the page function that is true once the app's script has stopped running.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
IDLE = (
    "() => document.querySelector('[data-test-script-state]')?.getAttribute('data-test-script-state') === 'notRunning'"
)
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


class ServerError(RuntimeError):
    """The server exited or was not healthy in time; the message names its log."""


def chromium() -> str | None:
    """Debian's chromium on PATH, or ``None``."""
    return shutil.which("chromium")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(
    log: Path, *, root: Path = ROOT, env: dict[str, str] | None = None, timeout_s: float = 120.0
) -> tuple[subprocess.Popen[bytes], str]:
    """A fresh server of ``root``'s app.py (offline; ``root`` first on the path) and its URL, once healthy.

    Args:
        log: the file its output goes to.
        root: the checkout to serve (an older commit unpacked elsewhere, for a before/after table).
        env: variables added to this process's environment (e.g. ``READ_OR_RECALL_PUBLIC``).
        timeout_s: how long it may take to answer its health check.

    Raises:
        ServerError: it exited or was not healthy in time (stopped then).
    """
    port = free_port()
    environ = {**os.environ, **OFFLINE, "PYTHONPATH": str(root), **(env or {})}
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true", "--server.port",
           str(port), "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false"]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=root, env=environ, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServerError(f"streamlit exited early with code {proc.returncode}; see {log}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                if response.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.3)
    stop_server(proc)
    raise ServerError(f"streamlit was not healthy within {timeout_s:.0f} s; see {log}")


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    """Terminate the server, and kill it when it does not stop within 20 s."""
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
