"""Connecting to Ray: a running cluster (``auto`` or an address), or a Ray started on this machine.

``--ray`` takes one of

* ``auto`` (the default of a bare ``--ray``): the cluster named by ``RAY_ADDRESS`` or, failing that, a Ray
  already running on this machine (``ray start --head``); when there is none, a Ray is started here for the
  run and stopped after it;
* ``local``: always start a Ray here for the run;
* ``HOST:PORT`` (the head node's GCS address, e.g. ``10.0.0.5:6379``) or ``ray://HOST:PORT`` (Ray Client).

An address that cannot be reached fails within seconds with a :class:`ClusterError` (a ``ValueError``, so the
CLI prints one ``error:`` line and exits with status 2) instead of Ray's own minute-long reconnect loop: the
address is probed with a plain TCP connection first.

Ray is imported inside the functions, never at module import, so ``core.scale`` costs nothing until ``--ray``
is used.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

AUTO = "auto"
LOCAL = "local"
ADDRESS_ENV = "READ_OR_RECALL_RAY_ADDRESS"
"""The app's setting: when set, the Evaluate page runs evaluations on the Ray cluster at this address."""
CONNECT_TIMEOUT_S = 3.0

_ADDRESS = re.compile(r"^(?:(?P<scheme>ray)://)?(?P<host>\[[0-9a-fA-F:]+\]|[A-Za-z0-9._-]+):(?P<port>\d{1,5})$")


class ClusterError(ValueError):
    """Ray cannot be reached or cannot run the job as asked (the message says why and what to do)."""


@dataclass(frozen=True)
class Session:
    """A connection to Ray made by :func:`connect`.

    Attributes:
        address: what was connected to (``"local"`` for a Ray started here).
        owned: whether :func:`connect` started or connected it (then :func:`disconnect` ends it); ``False`` when
            Ray was already initialized in this process (a test fixture, the app) and is left running.
    """

    address: str
    owned: bool


@dataclass(frozen=True)
class Node:
    """One alive node of the cluster and its resources (what the Evaluate page lists)."""

    node_id: str
    address: str
    cpus: float
    gpus: float
    memory_gb: float
    is_head: bool = False
    resources: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Every field but ``resources``, in field order."""
        return {k: v for k, v in asdict(self).items() if k != "resources"}


MAX_CPU_WORKERS = 8
"""Default cap on CPU workers (each holds its own copy of the model in memory)."""


def default_workers(gpus: float, cpus: float) -> int:
    """Workers when ``--workers`` is not given: one per GPU, or on a cluster without GPUs one per CPU (at most
    :data:`MAX_CPU_WORKERS`)."""
    if gpus >= 1:
        return int(gpus)
    return max(1, min(MAX_CPU_WORKERS, int(cpus)))


def parse_address(address: str) -> tuple[str, int]:
    """``(host, port)`` of ``HOST:PORT`` or ``ray://HOST:PORT``.

    Raises:
        ClusterError: anything else (the message shows the accepted forms).
    """
    m = _ADDRESS.match(address.strip())
    if m is None or not 0 < int(m.group("port")) < 65536:
        raise ClusterError(
            f"--ray {address!r} is not a Ray address: use auto, local, HOST:PORT (the head node's GCS port, "
            "e.g. 10.0.0.5:6379) or ray://HOST:PORT (Ray Client, port 10001)"
        )
    return m.group("host").strip("[]"), int(m.group("port"))


def check_address(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Probe ``address`` with a TCP connection, so a wrong address fails in seconds rather than after Ray's retries.

    Raises:
        ClusterError: malformed, or nothing accepts connections there within ``timeout_s``.
    """
    host, port = parse_address(address)
    reason = None
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except OSError as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or type(exc).__name__)
    if reason is not None:
        raise ClusterError(
            f"cannot reach a Ray cluster at {address} ({reason}, within {timeout_s:g} s); start one with "
            "`ray start --head` on the head node and pass its address (shown by `ray status`), or use --ray local"
        )


@contextmanager
def _short_gcs_wait(seconds: float) -> Iterator[None]:
    """Bound Ray's own connection attempts to a GCS (one a second; Ray's default is about 20) for one
    ``ray.init``, so an address that accepts TCP but is no Ray (a proxy, another service) fails in seconds.

    Ray's C++ client writes one warning line per failed attempt straight to file descriptor 2; those lines are
    held back while connecting and written out only when the connection succeeds (a failure is reported by
    the one :class:`ClusterError` line instead).
    """
    key = "RAY_gcs_server_port_wait_time_s"
    before = os.environ.get(key)
    os.environ[key] = str(max(1, int(seconds)))
    saved = held = None
    try:
        sys.stderr.flush()
        saved, held = os.dup(2), tempfile.TemporaryFile()  # noqa: SIM115 - closed in the finally below
        os.dup2(held.fileno(), 2)
    except (OSError, ValueError):  # no real stderr (e.g. a test capturing it): leave it alone
        saved = held = None
    ok = False
    try:
        yield
        ok = True
    finally:
        if saved is not None and held is not None:
            os.dup2(saved, 2)
            os.close(saved)
            if ok:
                held.seek(0)
                sys.stderr.write(held.read().decode("utf-8", "replace"))
            held.close()
        if before is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = before


def _quiet_data() -> None:
    """Ray Data without its own progress bars and per-run banners (our bar reports rows and rows/min)."""
    from ray.data import DataContext

    ctx = DataContext.get_current()
    ctx.enable_progress_bars = False
    if hasattr(ctx, "print_on_execution_start"):
        ctx.print_on_execution_start = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)


def connect(address: str | None = AUTO, *, num_cpus: int | None = None) -> Session:
    """Connect to Ray (see the module docstring for ``address``); reuse a Ray this process already initialized.

    Args:
        address: ``auto``, ``local``, ``HOST:PORT`` or ``ray://HOST:PORT``.
        num_cpus: CPUs of a Ray started here (default: all of this machine's).

    Raises:
        ClusterError: an address that is malformed or cannot be reached, or Ray refusing to start.
    """
    import ray

    if ray.is_initialized():
        _quiet_data()
        return Session(address="current", owned=False)
    target = (address or AUTO).strip() or AUTO
    common: dict[str, Any] = {"logging_level": logging.WARNING, "configure_logging": True}
    try:
        if target == LOCAL:
            ray.init(address=LOCAL, num_cpus=num_cpus, include_dashboard=False, **common)
        elif target == AUTO:
            env = os.environ.get("RAY_ADDRESS", "").strip()
            if env and env not in (AUTO, LOCAL):
                check_address(env)
                with _short_gcs_wait(CONNECT_TIMEOUT_S):
                    ray.init(address=env, **common)
                target = env
            else:
                try:
                    ray.init(address=AUTO, **common)
                except ConnectionError:  # no Ray running on this machine: start one for this run
                    logger.info("no running Ray found; starting one on this machine")
                    ray.init(address=LOCAL, num_cpus=num_cpus, include_dashboard=False, **common)
                    target = LOCAL
        else:
            check_address(target)
            with _short_gcs_wait(CONNECT_TIMEOUT_S):
                ray.init(address=target, **common)
    except ClusterError:
        raise
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ClusterError(
            f"could not connect to Ray at {target}: {exc} (is it a Ray head node's GCS address? `ray status` on "
            "the head node prints it)"
        ) from exc
    _quiet_data()
    return Session(address=target, owned=True)


def disconnect(session: Session) -> None:
    """Shut Ray down in this process if :func:`connect` started or connected it (a cluster keeps running)."""
    import ray

    if session.owned and ray.is_initialized():
        ray.shutdown()


def nodes() -> list[Node]:
    """The alive nodes of the connected cluster with their CPUs, GPUs and memory."""
    import ray

    out = []
    for n in ray.nodes():
        if not n.get("Alive", False):
            continue
        res = {k: float(v) for k, v in (n.get("Resources") or {}).items()}
        out.append(
            Node(
                node_id=str(n.get("NodeID", ""))[:12],
                address=str(n.get("NodeManagerAddress", "")),
                cpus=res.get("CPU", 0.0),
                gpus=res.get("GPU", 0.0),
                memory_gb=round(res.get("memory", 0.0) / 2**30, 1),
                is_head=any(k.startswith("node:__internal_head__") for k in res),
                resources=res,
            )
        )
    return out


def resources() -> dict[str, float]:
    """The cluster's total resources (``CPU``, ``GPU``, ``memory`` …)."""
    import ray

    return {k: float(v) for k, v in ray.cluster_resources().items()}
