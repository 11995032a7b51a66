"""The CRM audit service under load and under ``kill -9``: latency, throughput, batch speed-up, durability.

Phases, against a real ``python -m core serve`` process on a fresh database (the embedded model by default):

0. **bare** — in this process, before the server starts: the two plain forward passes an audit needs
   (retrieval prompt, parametric prompt; ``logits_to_keep=1``, no hooks) per pair, median over the pairs.
1. **sequential** — one client, one ``POST /audit`` at a time: the audit's latency as a ratio to phase 0
   (what HTTP, JSON, validation, the hooks, the projection and the fsynced commit add).
2. **concurrent /audit** — ``--clients`` httpx clients for ``--seconds``: p50/p99 latency, requests/s.
3. **concurrent /audit/batch** — the same clients sending ``--batch`` pairs per request: pairs/s, and the
   batch speed-up = pairs/s of phase 3 ÷ requests/s of phase 2.
4. **kill -9** — the clients send ``/audit`` with unique ``request_id``s; halfway through the server gets SIGKILL,
   then it is restarted on the same database and every request that had no answer is sent again with its
   ``request_id``. Checked: every 200 is in the database, the chain verifies, no ``request_id`` is stored twice.

Prints counts and ratios (no assertions); the last line is ``durability=ok`` or ``durability=FAILED``.
Keep the phases short on a small CPU: ``--seconds 20`` is enough to see the shape.
"""

from __future__ import annotations

import argparse
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
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx
import torch
from _common import set_threads

from core.audit.store import AuditReader, verify_chain
from core.engine import DualPathSettings, prepare_prompts
from core.evaluation import read_labeled_csv
from core.io import REPO_ROOT, asset_path
from core.model.loading import load_model

PROBES = asset_path("probes", "probes.csv")


def load_pairs(n: int) -> list[tuple[str, str]]:
    """The first ``n`` rows of the bundled probe set, memorized and grounded alternating."""
    rows = read_labeled_csv(PROBES)
    mem = [r for r in rows if r.label == "memorized"]
    gro = [r for r in rows if r.label == "grounded"]
    return [(r.query, r.context) for pair in zip(mem, gro) for r in pair][:n]


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank) of ``values``; NaN when empty."""
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def bare_forwards(model: str, pairs: list[tuple[str, str]], repeats: int) -> tuple[float, float, str, int]:
    """Median wall time (ms) of the two plain forward passes per pair, mean tokens per pair, model name, params."""
    handle = load_model(None if model == "embedded" else model, device="cpu")
    settings = DualPathSettings(max_new_tokens=1, score_window=1)
    prepared = [prepare_prompts(handle, q, c, settings) for q, c in pairs]

    def two(p) -> None:
        for ids in (p.retrieval.ids, p.parametric.ids):
            handle.forward(input_ids=torch.tensor([ids]), use_cache=False, logits_to_keep=1)

    two(prepared[0])  # warm-up
    times = []
    for _ in range(repeats):
        for p in prepared:
            t0 = time.perf_counter()
            two(p)
            times.append((time.perf_counter() - t0) * 1000)
    tokens = statistics.mean(len(p.retrieval.ids) + len(p.parametric.ids) for p in prepared)
    params = sum(x.numel() for x in handle.model.parameters())
    return statistics.median(times), tokens, handle.info.name, params


class Server:
    """A ``python -m core serve`` subprocess on a fixed port and database."""

    def __init__(self, args: argparse.Namespace, db: Path, token_file: Path, log: Path) -> None:
        self.port = args.port or _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.cmd = [sys.executable, "-m", "core", "serve", "--db", str(db), "--token-file", str(token_file)]
        self.cmd += ["--port", str(self.port), "--device", "cpu", "--max-batch", str(max(64, args.batch))]
        if args.model != "embedded":
            self.cmd += ["--model", args.model]
        if args.threads:
            self.cmd += ["--threads", str(args.threads)]
        self.log = log
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 300.0) -> float:
        t0 = time.perf_counter()
        with self.log.open("ab") as fh:
            env = {**os.environ, "HF_HUB_OFFLINE": "1"}
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

    def kill9(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=60)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_clients(
    n_clients: int, seconds: float, send: Callable[[httpx.Client, int], tuple[int, float]]
) -> tuple[list[float], dict[int, int], float]:
    """``n_clients`` threads calling ``send(client, i)`` until ``seconds`` pass (a client stops early when
    ``send`` returns a negative status); returns the latencies (ms) of the 200s, the count per status
    (0 = no response), and the elapsed wall time."""
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    lock = threading.Lock()
    stop = time.perf_counter() + seconds

    def worker(k: int) -> None:
        with httpx.Client(timeout=120) as client:
            i = 0
            while time.perf_counter() < stop:
                status, ms = send(client, k * 1_000_000 + i)
                i += 1
                if status < 0:  # the sender gave up (the server is gone): this client stops
                    with lock:
                        statuses[0] = statuses.get(0, 0) + 1
                    break
                with lock:
                    statuses[status] = statuses.get(status, 0) + 1
                    if status == 200:
                        latencies.append(ms)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies, statuses, time.perf_counter() - t0


class Load:
    """The requests the phases send: pairs in turn to ``/audit`` or ``/audit/batch`` of the server."""

    def __init__(self, server: Server, pairs: list[tuple[str, str]], token: str, batch_size: int) -> None:
        self.server, self.pairs, self.batch_size = server, pairs, batch_size
        self.headers = {"Authorization": f"Bearer {token}"}

    def post(self, client: httpx.Client, path: str, body: dict) -> tuple[httpx.Response | None, float]:
        """The response (``None`` when there was none) and its latency in ms."""
        t0 = time.perf_counter()
        try:
            r = client.post(f"{self.server.url}{path}", json=body, headers=self.headers)
        except httpx.HTTPError:
            return None, 0.0
        return r, (time.perf_counter() - t0) * 1000

    def audit_body(self, i: int, request_id: str | None = None) -> dict[str, str]:
        q, c = self.pairs[i % len(self.pairs)]
        return {"query": q, "context": c} | ({"request_id": request_id} if request_id else {})

    def one(self, client: httpx.Client, i: int) -> tuple[int, float]:
        r, ms = self.post(client, "/audit", self.audit_body(i))
        return (r.status_code, ms) if r is not None else (0, 0.0)

    def batch(self, client: httpx.Client, i: int) -> tuple[int, float]:
        items = [self.audit_body(i + j) for j in range(self.batch_size)]
        r, ms = self.post(client, "/audit/batch", {"items": items})
        return (r.status_code, ms) if r is not None else (0, 0.0)


def load_phases(load: Load, args: argparse.Namespace, bare_ms: float) -> None:
    """Phases 1–3: one client in turn, then concurrent ``/audit``, then concurrent ``/audit/batch``."""
    with httpx.Client(timeout=120) as client:
        load.one(client, 0)  # warm-up
        seq = [load.one(client, i)[1] for i in range(args.sequential)]
    seq_med = statistics.median(seq)
    print(
        f"[1] sequential /audit (1 client)         median {seq_med:8.1f} ms   p99 {pct(seq, 0.99):8.1f} ms   "
        f"ratio to bare forwards {seq_med / bare_ms:.2f}"
    )

    lat, st, wall = run_clients(args.clients, args.seconds, load.one)
    rps = len(lat) / wall
    mean = statistics.mean(lat) if lat else float("nan")
    print(
        f"[2] concurrent /audit ({args.clients} clients)       p50 {pct(lat, 0.5):8.1f} ms   "
        f"p99 {pct(lat, 0.99):8.1f} ms   mean {mean:8.1f} ms   {rps:6.2f} req/s   statuses {st}"
    )
    blat, bst, bwall = run_clients(args.clients, args.seconds, load.batch)
    pairs_per_s = len(blat) * args.batch / bwall
    speedup = pairs_per_s / rps if rps else float("nan")
    print(
        f"[3] concurrent /audit/batch (×{args.batch})      p50 {pct(blat, 0.5):8.1f} ms   "
        f"p99 {pct(blat, 0.99):8.1f} ms   {pairs_per_s:6.2f} pairs/s   statuses {bst}   batch speed-up {speedup:.2f}"
    )


def kill_phase(load: Load, args: argparse.Namespace, db: Path) -> bool:
    """Phase 4: kill -9 in the middle of the load, restart, resend what got no answer with the same request_id.

    Returns:
        Whether the database kept every answered request once, with a chain that verifies.
    """
    answered: dict[str, str] = {}
    unanswered: list[tuple[str, int]] = []
    lock = threading.Lock()
    prefix = uuid.uuid4().hex[:8]

    def durable(client: httpx.Client, i: int) -> tuple[int, float]:
        rid = f"{prefix}-{i}"
        r, ms = load.post(client, "/audit", load.audit_body(i, rid))
        if r is None:
            with lock:
                unanswered.append((rid, i))
            return -1, 0.0
        if r.status_code == 200:
            with lock:
                answered[rid] = r.json()["id"]
        return r.status_code, ms

    server = load.server
    killer = threading.Timer(args.seconds / 2, server.kill9)
    killer.start()
    _, kst, _ = run_clients(args.clients, args.seconds, durable)
    killer.join()
    restart = server.start()
    in_db_before = {r["request_id"]: r["id"] for r in AuditReader(db).requests_with_prefix(prefix)}
    missing = [rid for rid, rec in answered.items() if in_db_before.get(rid) != rec]
    lost_answers = [rid for rid, _ in unanswered if rid in in_db_before]
    with httpx.Client(timeout=120) as client:
        resent = {
            rid: client.post(f"{server.url}/audit", json=load.audit_body(i, rid), headers=load.headers)
            for rid, i in unanswered
        }
    replays = sum(r.headers.get("x-audit-replay") == "true" for r in resent.values())
    server.kill9()
    ids = [r["request_id"] for r in AuditReader(db).requests_with_prefix(prefix)]
    duplicates = len(ids) - len(set(ids))
    report = verify_chain(db)
    print(
        f"[4] kill -9 after {args.seconds / 2:g} s: statuses {kst}; {len(answered)} answered 200, all in the database: "
        f"{not missing} ({len(missing)} missing); {len(unanswered)} got no answer, of which {len(lost_answers)} had "
        f"been committed before the kill; restart {restart:.1f} s; resent {len(resent)} with their request_id → "
        f"{replays} replayed from the log, {len(resent) - replays} scored anew; duplicates {duplicates}; "
        f"chain {'verifies' if report.ok else 'BROKEN: ' + report.message} ({report.n_records} records)"
    )
    return not missing and duplicates == 0 and report.ok and all(r.status_code == 200 for r in resent.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded", help="embedded, a hub id or a local folder")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each load phase")
    parser.add_argument("--batch", type=int, default=8, help="pairs per /audit/batch request")
    parser.add_argument("--pairs", type=int, default=32, help="distinct pairs sent (from assets/probes/probes.csv)")
    parser.add_argument("--sequential", type=int, default=16, help="requests of the one-client phase")
    parser.add_argument("--threads", type=int, default=0, help="torch threads here and in the server (0 = default)")
    parser.add_argument("--port", type=int, default=0, help="server port (0 = a free one)")
    parser.add_argument("--workdir", default=None, help="where the database and logs go (default: a temp folder)")
    args = parser.parse_args()
    set_threads(args.threads)

    work = Path(args.workdir or tempfile.mkdtemp(prefix="audit-load-"))
    work.mkdir(parents=True, exist_ok=True)
    db, log, token_file = work / "audit.sqlite3", work / "serve.log", work / "token"
    for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        p.unlink(missing_ok=True)
    token = secrets.token_urlsafe(24)
    token_file.write_text(token + "\n")
    pairs = load_pairs(args.pairs)

    bare_ms, tokens, name, params = bare_forwards(args.model, pairs, repeats=2)
    print(
        f"model={name} params={params / 1e6:.0f}M device=cpu threads={torch.get_num_threads()} "
        f"cores={os.cpu_count()} pairs={len(pairs)} mean_prompt_tokens_per_audit={tokens:.0f} "
        f"clients={args.clients} seconds={args.seconds:g} batch={args.batch}"
    )
    print(f"[0] bare forwards (2 per audit, in-process)  median {bare_ms:8.1f} ms")

    server = Server(args, db, token_file, log)
    print(f"    server start {server.start():.1f} s (imports + model load); database {db}")
    load = Load(server, pairs, token, args.batch)
    load_phases(load, args, bare_ms)
    ok = kill_phase(load, args, db)
    print(f"durability={'ok' if ok else 'FAILED'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
