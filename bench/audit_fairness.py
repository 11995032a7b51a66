"""The audit service under one client's oversized batch, and under SIGTERM (issue 37, B): ratios, counts, seconds.

Against a real ``python -m core serve`` on a fresh database (the embedded model by default, the default limits
unless ``--serve-args`` says otherwise). Client A is the heavy one, client B sends single ``/audit`` requests of a
bundled probe pair, one at a time:

0. **solo** — B alone: the median latency of ``--singles`` audits (the baseline every ratio divides by).
1. **the issue's batch** — A sends ``--items`` × ``"word " * --words`` (64 × 2,400 words, ~770 KB) to
   ``/audit/batch`` while B sends one single, started together, ``--repeats`` times: A's statuses and time to an
   answer, B's median and worst latency ÷ solo. Then a stress beyond the issue: A re-sends the batch back to back
   for ``--seconds`` while B keeps sending singles.
2. **the largest accepted batch** — A sends one batch of K probe pairs, K the largest of 64, 32, 16, 8, 4, 2 the
   server accepts (within its token and time budgets), while B keeps sending singles until A's answer: A's
   status and time, B's median and worst latency ÷ solo.
3. **SIGTERM mid-batch** — a fresh server; B's singles answered, then A's accepted batch in flight, then
   SIGTERM: seconds to exit, A's answer, whether every B 200 is in the log and the chain verifies.
4. **SIGTERM mid-forward** — the same with A's single ``--words``-word audit in flight (one forward pass that
   cannot be interrupted and takes longer than the shutdown timeout on a CPU; this server runs with
   ``--request-budget 3600`` so that the audit is accepted on a slow machine).

No assertion: it prints figures, with the machine's load average (phase 2 before and after). The last line is
``sigterm=ok`` when both SIGTERM phases stopped the server within 10 s and kept every answered record, else
``sigterm=FAILED``. ``--phases 2`` runs the solo baseline and phase 2 only (issue 43 C: an accepted batch while
B sends singles back to back; a few minutes on a CPU).

    HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 .venv/bin/python bench/audit_fairness.py --threads 1
    HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 .venv/bin/python bench/audit_fairness.py --threads 1 --phases 2
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from core.audit.store import AuditReader, verify_chain
from core.evaluation import read_labeled_csv
from core.io import REPO_ROOT, asset_path


def probe_pairs() -> list[dict[str, str]]:
    """The bundled probe set's pairs as request bodies."""
    return [{"query": r.query, "context": r.context} for r in read_labeled_csv(asset_path("probes", "probes.csv"))]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``python -m core serve`` as a subprocess on a fresh database."""

    def __init__(self, args: argparse.Namespace, work: Path, name: str, extra: list[str] | None = None) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.db = work / f"{name}.sqlite3"
        self.log = work / f"{name}.log"
        self.token = secrets.token_urlsafe(24)
        self.headers = {"Authorization": f"Bearer {self.token}"}
        self.cmd = [sys.executable, "-m", "core", "serve", "--db", str(self.db), "--port", str(self.port)]
        self.cmd += ["--device", "cpu"] + (["--threads", str(args.threads)] if args.threads else [])
        self.cmd += ([] if args.model == "embedded" else ["--model", args.model]) + args.serve_args.split()
        self.cmd += extra or []
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 600.0) -> float:
        t0 = time.perf_counter()
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "READ_OR_RECALL_TOKEN": self.token}
        with self.log.open("ab") as fh:
            self.proc = subprocess.Popen(self.cmd, cwd=REPO_ROOT, env=env, stdout=fh, stderr=fh)
        while time.perf_counter() - t0 < timeout:
            if self.proc.poll() is not None:
                raise SystemExit(f"serve exited with {self.proc.returncode}; see {self.log}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return time.perf_counter() - t0
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise SystemExit(f"serve did not start in {timeout:.0f} s; see {self.log}")

    def post(self, client: httpx.Client, path: str, body: dict) -> tuple[int, float, httpx.Response | None]:
        """Status (0: no response), latency in ms, the response."""
        t0 = time.perf_counter()
        try:
            r = client.post(f"{self.url}{path}", json=body, headers=self.headers)
        except httpx.HTTPError:
            return 0, (time.perf_counter() - t0) * 1000, None
        return r.status_code, (time.perf_counter() - t0) * 1000, r

    def busy(self) -> bool:
        try:
            r = httpx.get(f"{self.url}/stats", headers=self.headers, timeout=10)
            return bool(r.json()["since_start"]["model_busy"])
        except (httpx.HTTPError, KeyError, ValueError):
            return False

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=60)


def singles_while(
    server: Server, pairs: list[dict], running: threading.Event, first: int = 0, statuses: dict | None = None
) -> list[float]:
    """B's loop: one single audit after another while ``running`` is set (at least one); latencies of the 200s
    (every status counted in ``statuses`` when given)."""
    out: list[float] = []
    i = first
    with httpx.Client(timeout=900) as client:
        while True:
            status, ms, _ = server.post(client, "/audit", pairs[i % len(pairs)])
            i += 1
            if statuses is not None:
                statuses[status] = statuses.get(status, 0) + 1
            if status == 200:
                out.append(ms)
            if not running.is_set():
                return out


def load_average() -> str:
    """The machine's 1/5/15-minute load averages (the bench shares the box: say how busy it was)."""
    try:
        return "/".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def peak_rss_mib(server: Server) -> float:
    """The server process's peak resident memory (``VmHWM``, Linux), MiB; NaN where it cannot be read."""
    try:
        for line in Path(f"/proc/{server.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except (OSError, AttributeError, ValueError):
        pass
    return float("nan")


def ratio_line(label: str, latencies: list[float], solo: float) -> str:
    if not latencies:
        return f"{label}: no single answered"
    med, worst = statistics.median(latencies), max(latencies)
    return (
        f"{label}: B's singles n={len(latencies)}  median {med:8.0f} ms = {med / solo:.2f}× solo   "
        f"worst {worst:8.0f} ms = {worst / solo:.2f}× solo"
    )


def phase_issue_batch(server: Server, args: argparse.Namespace, pairs: list[dict], solo: float) -> None:
    item = {"context": "word " * args.words}
    big = {"items": [{"query": f"What does passage {i} say?", **item} for i in range(args.items)]}
    body_kb = len(str(big).encode()) / 1024

    # 1a: the issue's case — A sends the batch once while B sends one single, started together; repeated.
    together: list[float] = []
    a_once: list[float] = []
    statuses: dict[int, int] = {}
    detail = ""
    with httpx.Client(timeout=3600) as a_client, httpx.Client(timeout=900) as b_client:
        for k in range(args.repeats):
            result: dict[str, object] = {}

            def heavy(res: dict[str, object] = result) -> None:
                res["a"] = server.post(a_client, "/audit/batch", big)

            thread = threading.Thread(target=heavy)
            thread.start()
            status, ms, _ = server.post(b_client, "/audit", pairs[(k + 3) % len(pairs)])
            thread.join()
            a_status, a_ms, a_r = result["a"]  # type: ignore[misc]
            statuses[a_status] = statuses.get(a_status, 0) + 1
            a_once.append(a_ms)
            if a_status != 200:
                detail = detail_of(a_r)
            if status == 200:
                together.append(ms)
    print(
        f"[1] A: {args.items} × {args.words}-word batch (~{body_kb:.0f} KiB), sent once with B's single, "
        f"{args.repeats}×: statuses {statuses}, answered in median {statistics.median(a_once):.0f} ms; {detail}"
    )
    print("    " + ratio_line("with it", together, solo))

    # 1b: a stress beyond the issue — A re-sends the batch back to back for --seconds while B keeps sending.
    running = threading.Event()
    running.set()
    sent: list[float] = []

    def hammer() -> None:
        stop = time.perf_counter() + args.seconds
        with httpx.Client(timeout=3600) as client:
            while time.perf_counter() < stop:
                sent.append(server.post(client, "/audit/batch", big)[1])
        running.clear()

    thread = threading.Thread(target=hammer)
    thread.start()
    lat = singles_while(server, pairs, running)
    thread.join()
    print(f"    A re-sending it back to back for {args.seconds:g} s ({len(sent)} refusals):")
    print("    " + ratio_line("meanwhile", lat, solo))


def detail_of(r: httpx.Response | None) -> str:
    """A response's ``detail`` (its text when it is not JSON), cut short."""
    if r is None:
        return ""
    try:
        return str(r.json().get("detail", ""))[:150]
    except ValueError:
        return r.text[:150]


def largest_accepted(server: Server, pairs: list[dict]) -> tuple[int, dict, float]:
    """The largest K in 64, 32, … 2 whose batch of probe pairs the server's budgets accept, and the time (ms) the
    accepted one took alone (each larger one is refused up front; the accepted one runs once here, alone)."""
    with httpx.Client(timeout=3600) as client:
        for k in (64, 32, 16, 8, 4, 2):
            body = {"items": [pairs[i % len(pairs)] for i in range(k)]}
            status, ms, r = server.post(client, "/audit/batch", body)
            if status == 200:
                return k, body, ms
            if r is None or status != 413:
                raise SystemExit(f"unexpected status {status} for a batch of {k}: {detail_of(r)}")
    raise SystemExit("no batch accepted")


def phase_accepted_batch(server: Server, pairs: list[dict], solo: float) -> dict:
    k, body, alone_ms = largest_accepted(server, pairs)
    running = threading.Event()
    running.set()
    result: dict[str, object] = {}

    def heavy() -> None:
        with httpx.Client(timeout=3600) as client:
            status, ms, r = server.post(client, "/audit/batch", body)
        result.update(status=status, ms=ms, detail="" if status == 200 else detail_of(r)[:100])
        running.clear()

    statuses: dict[int, int] = {}
    before = load_average()
    thread = threading.Thread(target=heavy)
    thread.start()
    lat = singles_while(server, pairs, running, first=7, statuses=statuses)
    thread.join()
    print(
        f"[2] A: the largest accepted batch, {k} probe pairs: alone {alone_ms:.0f} ms; with B sending singles back "
        f"to back: status {result['status']}, {result['ms']:.0f} ms = {result['ms'] / alone_ms:.2f}× alone "
        f"{result.get('detail', '')!r}"
    )
    print("    " + ratio_line("during it", lat, solo) + f"   B's statuses {statuses}")
    print(f"    load average before / after: {before} / {load_average()}")
    return body


def phase_sigterm(
    args: argparse.Namespace, work: Path, name: str, heavy_body: dict, path: str, extra: list[str] | None = None
) -> bool:
    server = Server(args, work, name, extra)
    server.start()
    pairs = probe_pairs()
    answered = []
    with httpx.Client(timeout=900) as client:
        for i in range(3):
            status, _, r = server.post(client, "/audit", {**pairs[i], "request_id": f"b-{i}"})
            if status == 200:
                answered.append(r.json()["id"])
    outcome: dict[str, object] = {}

    def heavy() -> None:
        with httpx.Client(timeout=3600) as client:
            status, _, r = server.post(client, path, heavy_body)
        outcome.update(status=status, detail=detail_of(r)[:100])

    thread = threading.Thread(target=heavy)
    thread.start()
    for _ in range(600):
        if server.busy():
            break
        time.sleep(0.1)
    time.sleep(args.settle)
    t0 = time.perf_counter()
    server.proc.send_signal(signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        server.proc.wait(timeout=120)
    stopped = time.perf_counter() - t0
    code = server.proc.poll()
    server.kill()
    thread.join(timeout=60)
    total, records = AuditReader(server.db).history(limit=1000)
    kept = sorted(r["id"] for r in records) == sorted(answered)
    report = verify_chain(server.db)
    print(
        f"    SIGTERM with {path} in flight: exited after {stopped:.1f} s (status {code}); A got "
        f"{outcome.get('status')} {outcome.get('detail', '')!r}; B's {len(answered)} answered records all kept: "
        f"{kept} ({total} in the log); chain {'verifies' if report.ok else 'BROKEN'}"
    )
    return code is not None and stopped <= 10.0 and kept and report.ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded", help="embedded, a hub id or a local folder")
    parser.add_argument("--items", type=int, default=64, help="items of the issue's batch")
    parser.add_argument("--words", type=int, default=2400, help="words per item of the issue's batch")
    parser.add_argument("--singles", type=int, default=8, help="B's solo audits (the baseline)")
    parser.add_argument("--repeats", type=int, default=8, help="times A sends the issue's batch with one of B's")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long A re-sends it back to back")
    parser.add_argument("--settle", type=float, default=2.0, help="seconds A's work runs before SIGTERM")
    parser.add_argument("--threads", type=int, default=1, help="torch threads in the server (0 = torch's default)")
    parser.add_argument("--serve-args", default="", help="more serve flags, e.g. '--request-budget 120'")
    parser.add_argument("--workdir", default=None, help="where the databases and logs go (default: a temp folder)")
    parser.add_argument(
        "--phases", default="1,2,3,4", help="phases to run after the solo baseline ('2': the accepted batch only)"
    )
    args = parser.parse_args()
    phases = {p.strip() for p in args.phases.split(",") if p.strip()}
    work = Path(args.workdir or tempfile.mkdtemp(prefix="audit-fairness-"))
    work.mkdir(parents=True, exist_ok=True)
    pairs = probe_pairs()

    server = Server(args, work, "load")
    started = server.start()
    print(
        f"model={args.model} threads={args.threads} cores={os.cpu_count()} load average {load_average()} "
        f"server start {started:.1f} s; logs in {work}"
    )
    try:
        with httpx.Client(timeout=900) as client:
            server.post(client, "/audit", pairs[0])  # warm-up
            solo_ms = [server.post(client, "/audit", pairs[i % len(pairs)])[1] for i in range(args.singles)]
        solo = statistics.median(solo_ms)
        print(f"[0] B alone: {args.singles} single audits, median {solo:.0f} ms (min {min(solo_ms):.0f}, "
              f"max {max(solo_ms):.0f})")  # fmt: skip
        if "1" in phases:
            phase_issue_batch(server, args, pairs, solo)
        accepted = phase_accepted_batch(server, pairs, solo) if phases & {"2", "3"} else None
        print(f"    the server's peak resident memory so far: {peak_rss_mib(server):,.0f} MiB")
    finally:
        server.kill()
    ok = True
    if "3" in phases and accepted is not None:
        print("[3] SIGTERM mid-batch (a fresh server)")
        ok = phase_sigterm(args, work, "sigterm-batch", accepted, "/audit/batch")
    if "4" in phases:
        print("[4] SIGTERM mid-forward (a fresh server)")
        long_single = {"query": "What does the passage say?", "context": "word " * args.words}
        ok = phase_sigterm(args, work, "sigterm-forward", long_single, "/audit", ["--request-budget", "3600"]) and ok
    if phases & {"3", "4"}:
        print(f"sigterm={'ok' if ok else 'FAILED'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
