"""Connecting to Ray: address forms, and a bad address failing fast with one clear line (no Ray started)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from core.scale import cluster
from core.scale.cluster import ClusterError, check_address, connect, parse_address


def _closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10.0.0.5:6379", ("10.0.0.5", 6379)),
        ("ray://head.example:10001", ("head.example", 10001)),
        ("[::1]:6379", ("::1", 6379)),
        (" head:1 ", ("head", 1)),
    ],
)
def test_parse_address(text, expected):
    assert parse_address(text) == expected


@pytest.mark.parametrize("text", ["garbage", "head", "head:0", "head:70000", "http://head:80", "a b:1"])
def test_parse_address_refuses_other_forms(text):
    with pytest.raises(ClusterError, match="not a Ray address"):
        parse_address(text)


def test_refused_address_fails_before_ray_is_asked(monkeypatch):
    ray = pytest.importorskip("ray")

    def no_init(*args, **kwargs):
        raise AssertionError("ray.init must not be called for an address that refuses connections")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", no_init)
    port = _closed_port()
    with pytest.raises(ClusterError, match=f"cannot reach a Ray cluster at 127.0.0.1:{port}"):
        connect(f"127.0.0.1:{port}")


def test_address_that_is_not_ray_gets_bounded_retries(monkeypatch):
    """A port that accepts TCP but is no GCS: Ray is asked with its connection attempts capped (one a second,
    3 in all instead of ~20), and its failure becomes one ClusterError."""
    ray = pytest.importorskip("ray")
    seen = {}

    def fake_init(*args, **kwargs):
        seen["wait"] = os.environ.get("RAY_gcs_server_port_wait_time_s")  # noqa: SIM112 - Ray's own spelling
        seen["address"] = kwargs.get("address")
        raise ConnectionError("Failed to connect to Ray cluster")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", fake_init)
    monkeypatch.delenv("RAY_gcs_server_port_wait_time_s", raising=False)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        address = f"127.0.0.1:{server.getsockname()[1]}"
        check_address(address)  # TCP accepts
        with pytest.raises(ClusterError, match="could not connect to Ray at"):
            connect(address)
    assert seen == {"wait": str(int(cluster.CONNECT_TIMEOUT_S)), "address": address}
    assert "RAY_gcs_server_port_wait_time_s" not in os.environ  # restored


def test_cli_bad_address_is_one_line_and_exit_2(tmp_path):
    data = tmp_path / "d.csv"
    data.write_text("query,context,label\nq1,c1,memorized\nq2,c2,grounded\n", encoding="utf-8")
    port = _closed_port()
    cmd = [sys.executable, "-m", "core", "evaluate", str(data), "--out", str(tmp_path / "o.json")]
    proc = subprocess.run(
        [*cmd, "--max-new-tokens", "4", "--ray", f"127.0.0.1:{port}"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"cannot reach a Ray cluster at 127.0.0.1:{port}" in errors[0], proc.stderr
    assert not (tmp_path / "o.json").exists()


def test_workers_needs_ray():
    from argparse import Namespace

    from core.scale.options import check_ray_args

    with pytest.raises(ValueError, match="--workers needs --ray"):
        check_ray_args(Namespace(workers=2, ray=None))
    with pytest.raises(ValueError, match="at least 1"):
        check_ray_args(Namespace(workers=0, ray="auto"))


def test_a_nodes_dict_is_every_field_but_its_resources():
    node = cluster.Node("n1", "10.0.0.2", 8.0, 1.0, 31.5, is_head=True, resources={"CPU": 8.0, "GPU": 1.0})
    assert node.to_dict() == {
        "node_id": "n1",
        "address": "10.0.0.2",
        "cpus": 8.0,
        "gpus": 1.0,
        "memory_gb": 31.5,
        "is_head": True,
    }
    assert list(node.to_dict()) == ["node_id", "address", "cpus", "gpus", "memory_gb", "is_head"]
