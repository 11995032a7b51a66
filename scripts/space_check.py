"""``make space-check``: build the Hugging Face Space image from the repository's own Dockerfile, start it, and
check what a Space visitor gets.

What is built is what a Space builds: the committed tree (``git archive HEAD``, so others' uncommitted edits
cannot break or change it; ``--worktree`` builds the working tree instead), with its Dockerfile unchanged (its
sha256 is printed). Only two things come from this machine, both outside the Dockerfile:

* **the base** ``python:3.11-slim``: used when the container store has it (or a registry can supply it); when
  it is missing and ``debootstrap`` is available (as root), a stand-in of that name is built locally: a Debian
  bookworm ``minbase`` with Debian's python3.11 in a virtual environment at ``/usr/local`` (so ``python`` and
  ``pip`` are on ``PATH`` as in the official image);
* **where torch comes from**: ``--torch-index-url URL`` passes the Dockerfile's ``TORCH_INDEX_URL`` build
  argument; otherwise, when a folder of wheels holds a torch wheel (``--wheels``, default ``/opt/wheels``), it
  is mounted read-only into the build with a read-only ``/etc/pip.conf`` that names it as ``find-links`` (and
  the host's CA bundle as pip's ``cert``), so pip takes the local CPU wheel instead of the default index's CUDA
  build. Build mounts are not part of any layer.

Then the container runs with the image's own command, on a published port, with ``HF_ENDPOINT`` pointing at a
closed local port (any request to the Hugging Face hub would fail), and the script checks:

1. ``/_stcore/health`` answers 200 within the Space's start-up limit (30 min, the Spaces default);
2. the landing page paints its title in a real browser (Debian chromium driven by Playwright);
3. the Dual Path page's first bundled example runs to a verdict in that browser;
4. the app process (PID 1) runs as uid 1000 with ``READ_OR_RECALL_PUBLIC=1`` and the page says public mode;
5. a model id off the allow-list (and a server folder) is refused by the container's public policy;
6. the container's own ``python -m core run --json`` gives the same Z (``repcs_score``) as this host's (the
   same tree, this machine's ``.venv``) to 1e-5;
7. nothing was downloaded from the hub (no ``~/.cache/huggingface/hub`` in the container).

It prints the image size, the build time and the cold-start time (``podman run`` to the first healthy answer).
Where no container runtime can run (no ``podman``, or ``podman info`` fails) it prints one ``space-check
skipped: …`` line and exits 0. Artefacts (build log, container log, screenshots) go to ``out/space-check/``.

Podman on this machine needs ``default_ulimits = []`` and ``cgroup_manager = "cgroupfs"``: unless
``CONTAINERS_CONF`` is set, the script writes such a ``containers.conf`` into a temporary folder and points
``CONTAINERS_CONF`` at it (the machine's own configuration is never edited), and it uses ``--runtime runc``
when ``runc`` is installed.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "out" / "space-check"
IMAGE = "localhost/read-or-recall-space:check"
BASE = "python:3.11-slim"
CONTAINER = "read-or-recall-space-check"
APP_PORT = 8501  # the Dockerfile's EXPOSE and the front matter's app_port
SPACE_STARTUP_LIMIT_S = 30 * 60  # Spaces' default startup_duration_timeout
HUB_BLACKHOLE = "http://127.0.0.1:9"  # a closed port: any hub request fails at once
Z_TOLERANCE = 1e-5
FIXED_MTIME = 946_684_800  # 2000-01-01: the build context's file times (see snapshot())
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
CONTAINERS_CONF = '[containers]\ndefault_ulimits = []\n\n[engine]\ncgroup_manager = "cgroupfs"\n'
# The Dual Path check and the Z comparison both use the first bundled example; the CLI run is short.
Z_MAX_NEW_TOKENS = 16
VERDICT = re.compile("Recalled from memory|Read from the context|Neither: a guess|Inconclusive|No threshold")


class Skip(Exception):
    """No container runtime can run here: one line, exit 0."""


class Podman:
    """``podman`` with this machine's settings (a temporary containers.conf unless one is set; runc)."""

    def __init__(self, conf_dir: Path) -> None:
        exe = shutil.which("podman")
        if exe is None:
            raise Skip("no container runtime (podman is not on PATH)")
        self.env = dict(os.environ)
        if not self.env.get("CONTAINERS_CONF"):
            conf = conf_dir / "containers.conf"
            conf.write_text(CONTAINERS_CONF, encoding="utf-8")
            self.env["CONTAINERS_CONF"] = str(conf)
        self.cmd = [exe] + (["--runtime", "runc"] if shutil.which("runc") else [])
        info = self.run("info", "--format", "{{.Host.OCIRuntime.Name}}", check=False)
        if info.returncode != 0:
            raise Skip(f"podman cannot run here: {(info.stderr or info.stdout).strip().splitlines()[-1:]}")

    def run(
        self, *args: str, check: bool = True, timeout: float | None = 600, **kw: Any
    ) -> subprocess.CompletedProcess:
        done = subprocess.run(
            [*self.cmd, *args], env=self.env, capture_output=True, text=True, timeout=timeout, check=False, **kw
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"podman {' '.join(args[:3])} … failed ({done.returncode}): {done.stderr[-2000:]}")
        return done

    def image_exists(self, name: str) -> bool:
        return self.run("image", "exists", name, check=False).returncode == 0


def build_stand_in_base(podman: Podman, work: Path) -> None:
    """A local ``python:3.11-slim``: Debian bookworm minbase + python3.11 in a venv at /usr/local (~1 min)."""
    if os.geteuid() != 0 or shutil.which("debootstrap") is None:
        raise Skip(f"no {BASE} image here and no debootstrap (as root) to build a stand-in")
    rootfs = work / "rootfs"
    print(f"building a stand-in {BASE} (debootstrap bookworm + Debian's python3.11) …", flush=True)
    steps = [
        ["debootstrap", "--variant=minbase", "--include=python3,python3-venv,ca-certificates", "bookworm",
         str(rootfs), "http://deb.debian.org/debian"],
        ["chroot", str(rootfs), "python3", "-m", "venv", "/usr/local"],
        ["chroot", str(rootfs), "sh", "-c", "apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin"],
    ]  # fmt: skip
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{step[0]} failed: {done.stderr[-2000:]}")
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
    changes = [
        "ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin",
        "ENV LANG=C.UTF-8",
        'CMD ["python3"]',
    ]
    args = [a for c in changes for a in ("--change", c)]
    podman.run("import", *args, "-", f"localhost/{BASE}", stdin=tar.stdout)
    tar.wait()
    shutil.rmtree(rootfs, ignore_errors=True)


def torch_source(args: argparse.Namespace, work: Path) -> tuple[list[str], str]:
    """Build options that say where torch comes from, and a line describing it."""
    if args.torch_index_url:
        return ["--build-arg", f"TORCH_INDEX_URL={args.torch_index_url}"], f"TORCH_INDEX_URL={args.torch_index_url}"
    wheels = Path(args.wheels)
    found = sorted(wheels.glob("torch-*.whl")) if wheels.is_dir() else []
    if not found:
        return [], "pip's default index (no local torch wheel; set --torch-index-url for a CPU build)"
    conf = ["[global]", f"find-links = {wheels}"]
    mounts = ["-v", f"{wheels}:{wheels}:ro"]
    ca = Path("/etc/ssl/certs/ca-certificates.crt")
    if ca.is_file():  # the host's bundle (it holds any egress proxy's CA the host trusts)
        conf.append("cert = /etc/pip-host-ca.crt")
        mounts += ["-v", f"{ca}:/etc/pip-host-ca.crt:ro"]
    pip_conf = work / "pip.conf"
    pip_conf.write_text("\n".join(conf) + "\n", encoding="utf-8")
    return [*mounts, "-v", f"{pip_conf}:/etc/pip.conf:ro"], f"read-only mount of {wheels} ({found[-1].name})"


def snapshot(work: Path, worktree: bool) -> Path:
    """The build context: the committed tree (``git archive HEAD``) or, with ``--worktree``, the checkout."""
    if worktree:
        return ROOT
    tree = work / "context"
    tree.mkdir()
    archive = subprocess.run(["git", "archive", "--format=tar", "HEAD"], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    # git archive stamps every file with the commit's time: one fixed time makes the context depend on the
    # files' contents only, so an unchanged requirements.txt (or core/) keeps its cached layers.
    for path in [tree, *tree.rglob("*")]:
        os.utime(path, (FIXED_MTIME, FIXED_MTIME), follow_symlinks=False)
    return tree


def build(podman: Podman, context: Path, extra: list[str], pull_never: bool) -> tuple[float, int, int]:
    """``podman build`` of the repository's Dockerfile; returns (seconds, steps, steps taken from the cache)."""
    log = OUT / "build.log"
    cmd = ["build", "--format", "docker", "--network", "host", "--layers", "-t", IMAGE, "-f", "Dockerfile"]
    cmd += (["--pull=never"] if pull_never else []) + extra + [str(context)]
    start = time.monotonic()
    with open(log, "w", encoding="utf-8") as out:
        done = subprocess.run([*podman.cmd, *cmd], env=podman.env, cwd=context, stdout=out, stderr=subprocess.STDOUT)
    seconds = time.monotonic() - start
    text = log.read_text(encoding="utf-8", errors="replace")
    if done.returncode != 0:
        raise RuntimeError(f"podman build failed ({done.returncode}); {log}:\n{text[-3000:]}")
    steps = len(re.findall(r"^STEP \d+/", text, flags=re.M))
    cached = len(re.findall(r"^--> Using cache", text, flags=re.M))
    return seconds, steps, cached


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_healthy(podman: Podman, url: str, limit_s: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < limit_s:
        state = podman.run("inspect", "--format", "{{.State.Status}}", CONTAINER, check=False).stdout.strip()
        if state in ("exited", "stopped"):
            raise RuntimeError(f"the container stopped ({state}); log:\n{container_log(podman)[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                if response.status == 200:
                    return time.monotonic() - start
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise RuntimeError(f"/_stcore/health did not answer within {limit_s:.0f} s")


def container_log(podman: Podman) -> str:
    done = podman.run("logs", CONTAINER, check=False)
    return done.stdout + done.stderr


def in_container(podman: Podman, *cmd: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return podman.run("exec", CONTAINER, *cmd, check=False, timeout=timeout)


def first_example(tree: Path = ROOT) -> dict[str, str]:
    return json.loads((tree / "assets" / "examples" / "examples.json").read_text(encoding="utf-8"))[0]


def browser_checks(url: str) -> tuple[str, float, str, float]:
    """Landing title, then the first example on the Dual Path page to a verdict; returns (title, seconds to
    paint it, verdict, seconds from the click on Run to the verdict)."""
    chromium = shutil.which("chromium")
    if chromium is None:
        raise RuntimeError("Debian's chromium is not on PATH (`make browser`)")
    from playwright.sync_api import sync_playwright

    example = first_example()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_context(viewport={"width": 1440, "height": 1100}).new_page()
            page.set_default_timeout(300_000)
            opened = time.monotonic()
            page.goto(url)
            heading = page.get_by_role("heading", name="Read or Recall").first
            heading.wait_for()
            painted = time.monotonic() - opened
            title = heading.inner_text().strip()
            page.screenshot(path=str(OUT / "landing.png"))

            page.goto(f"{url}/Dual_Path")
            page.get_by_role("heading", name="Dual Path").first.wait_for()
            idle = "() => document.querySelector('[data-test-script-state]')?.getAttribute('data-test-script-state') === 'notRunning'"  # noqa: E501
            page.wait_for_function(idle, timeout=300_000)
            sidebar = page.locator('[data-testid="stSidebar"]').inner_text()
            if "Public mode" not in sidebar:
                raise RuntimeError("the sidebar does not say public mode")
            page.get_by_role("combobox", name="Example").click()  # the placeholder is an <input> attribute
            page.get_by_role("option", name=re.compile(re.escape(example["title"]))).first.click()
            page.wait_for_timeout(1500)
            page.wait_for_function(idle, timeout=120_000)
            query = page.get_by_role("textbox", name="Query", exact=True).input_value()
            if query != example["query"]:
                raise RuntimeError(f"picking the example did not fill the query (got {query!r})")
            start = time.monotonic()
            page.get_by_role("button", name="Run both paths").click()
            errors = page.locator('[data-testid="stException"], [data-testid="stAlertContentError"]')
            verdict = page.get_by_text(VERDICT).first
            verdict.or_(errors.first).wait_for(timeout=600_000)
            if errors.count():
                raise RuntimeError(f"the app showed an error: {errors.first.inner_text()[:1000]}")
            seconds = time.monotonic() - start
            page.wait_for_function(idle, timeout=600_000)
            page.screenshot(path=str(OUT / "dual_path.png"), full_page=True)
            return title, painted, verdict.inner_text().strip(), seconds
        finally:
            browser.close()


def z_of(output: str) -> tuple[float, str]:
    data = json.loads(output[output.index("{") :])
    return float(data["repcs_score"]), str(data["rag_answer"])


def run_checks(podman: Podman, url: str, tree: Path) -> list[tuple[str, bool, str]]:
    results: list[tuple[str, bool, str]] = []

    def record(name: str, ok: bool, detail: str) -> None:
        results.append((name, ok, detail))
        print(f"  {'PASS' if ok else 'FAIL'}  {name}: {detail}", flush=True)

    status = in_container(podman, "cat", "/proc/1/status", "/proc/1/cmdline").stdout
    uid = re.search(r"^Uid:\s+(\d+)", status, flags=re.M)
    environ = in_container(podman, "sh", "-c", "tr '\\0' '\\n' < /proc/1/environ").stdout.splitlines()
    public = "READ_OR_RECALL_PUBLIC=1" in environ
    ok = bool(uid) and uid.group(1) == "1000" and public and "streamlit" in status
    record("uid 1000, public mode", ok, f"PID 1 uid {uid.group(1) if uid else '?'}, READ_OR_RECALL_PUBLIC=1: {public}")

    probe = (
        "from core.public import PublicPolicy\n"
        "p = PublicPolicy.from_env()\n"
        "for spec in ('gpt2', 'meta-llama/Llama-3.1-8B', '/home/user/app'):\n"
        "    try:\n"
        "        p.check_model(spec)\n"
        "        print('ALLOWED', spec)\n"
        "    except ValueError as exc:\n"
        "        print('REFUSED', spec, '|', exc)\n"
    )
    done = in_container(podman, "python", "-c", probe)
    lines = done.stdout.strip().splitlines()
    refused = [ln for ln in lines if ln.startswith("REFUSED")]
    record("off-allow-list model refused", done.returncode == 0 and len(refused) == 3, "; ".join(lines) or done.stderr)

    try:
        title, painted, verdict, seconds = browser_checks(url)
        record(
            "landing page title (chromium)",
            title == "Read or Recall",
            f"{title!r} painted {painted:.1f} s after opening",
        )
        record("Dual Path example to a verdict", True, f"{verdict!r} in {seconds:.0f} s")
    except Exception as exc:  # noqa: BLE001 - reported as a failed check with the page's own message
        record("browser (landing title, Dual Path verdict)", False, f"{type(exc).__name__}: {str(exc)[:1500]}")

    example = first_example(tree)
    args = ["-m", "core", "run", "--query", example["query"], "--context", example["context"], "--json"]
    args += ["--max-new-tokens", str(Z_MAX_NEW_TOKENS)]
    inside = in_container(podman, "python", *args)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    host = subprocess.run([sys.executable, *args], cwd=tree, env=env, capture_output=True, text=True, check=False)
    try:
        (z_in, ans_in), (z_host, ans_host) = z_of(inside.stdout), z_of(host.stdout)
        diff = abs(z_in - z_host)
        record(
            "container Z = host Z",
            diff <= Z_TOLERANCE and ans_in == ans_host,
            f"Z {z_in:.8f} (container) vs {z_host:.8f} (host), |ΔZ| = {diff:.2e}; same answer: {ans_in == ans_host}",
        )
    except (ValueError, KeyError) as exc:
        record("container Z = host Z", False, f"{exc}: {inside.stderr[-800:]} {host.stderr[-800:]}")

    hub = in_container(podman, "sh", "-c", "ls -A /home/user/.cache/huggingface/hub 2>/dev/null | head -5").stdout
    record("nothing fetched from the hub", not hub.strip(), f"~/.cache/huggingface/hub: {hub.strip() or 'absent'}")
    return results


def git_head() -> str:
    return subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--torch-index-url", default="", help="the Dockerfile's TORCH_INDEX_URL build argument")
    parser.add_argument("--wheels", default="/opt/wheels", help="a folder holding a (CPU) torch wheel to mount")
    parser.add_argument("--keep", action="store_true", help="leave the container running afterwards")
    parser.add_argument("--worktree", action="store_true", help="build the working tree instead of HEAD")
    args = parser.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="space-check-") as tmp:
        work = Path(tmp)
        try:
            podman = Podman(work)
        except Skip as why:
            print(f"space-check skipped: {why}")
            return 0
        tree = snapshot(work, args.worktree)
        dockerfile = tree / "Dockerfile"
        source = "the working tree" if args.worktree else f"HEAD {git_head()}"
        digest = hashlib.sha256(dockerfile.read_bytes()).hexdigest()
        print(f"building {source}; Dockerfile sha256 {digest} (used unchanged)")
        local_base = podman.image_exists(BASE)
        if not local_base and shutil.which("debootstrap"):
            try:
                build_stand_in_base(podman, work)
            except Skip as why:
                print(f"space-check skipped: {why}")
                return 0
            local_base = True
        extra, torch_line = torch_source(args, work)
        print(f"base: {BASE} ({'local image' if local_base else 'from the registry'}); torch: {torch_line}")
        print("building the image (build log: out/space-check/build.log) …", flush=True)
        build_s, steps, cached = build(podman, tree, extra, pull_never=local_base)
        size = int(podman.run("image", "inspect", "--format", "{{.Size}}", IMAGE).stdout.strip())

        podman.run("rm", "-f", CONTAINER, check=False)
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        start = time.monotonic()
        podman.run("run", "-d", "--name", CONTAINER, "-p", f"127.0.0.1:{port}:{APP_PORT}", "-e",
                   f"HF_ENDPOINT={HUB_BLACKHOLE}", IMAGE)  # fmt: skip
        try:
            cold = time.monotonic() - start
            cold += wait_healthy(podman, url, SPACE_STARTUP_LIMIT_S)
            print(f"  PASS  /_stcore/health: 200 after {cold:.1f} s (limit {SPACE_STARTUP_LIMIT_S} s)", flush=True)
            results = run_checks(podman, url, tree)
        finally:
            (OUT / "container.log").write_text(container_log(podman), encoding="utf-8")
            if not args.keep:
                podman.run("rm", "-f", CONTAINER, check=False)
        failed = [name for name, ok, _ in results if not ok]
        print(f"image size: {size / 1e6:.0f} MB ({IMAGE})")
        print(f"build time: {build_s:.1f} s ({steps} steps, {cached} from the layer cache)")
        print(f"cold start: {cold:.1f} s (podman run to the first 200 from /_stcore/health)")
        print(f"space-check: {'FAILED: ' + ', '.join(failed) if failed else 'all checks passed'}")
        return 1 if failed else 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
    sys.exit(130)
