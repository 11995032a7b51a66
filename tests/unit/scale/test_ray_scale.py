"""Scale-out on a local Ray (one session for the module, 2 CPUs): results equal the local path's, row by row.

Every Ray run here starts fresh actor processes (each imports torch and loads the tiny model), so the module
keeps to a handful of runs: the evaluate CLI with two workers, one run with an actor killed mid-way, the
single-layer sweep, and SMA through ``detect``.
"""

from __future__ import annotations

import csv
import itertools
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from core.cli import main
from core.engine import DualPathSettings
from core.evaluation import evaluate_rows
from core.evaluation.data import LabeledRow

pytestmark = pytest.mark.usefixtures("one_thread")

SETTINGS = DualPathSettings(max_new_tokens=6, score_window=6)
DETECTORS = "repcs,max_token_kl,zlib,min_k_20,crm_l2_lr"
QUERY = "What is the capital of Veltria?"
CONTEXT = "The capital of Veltria is Marrowgate. It is a port city on the northern coast."


def labeled_rows(n: int) -> list[LabeledRow]:
    """``n`` labeled rows of varied lengths (so the length-sorted batches reorder them), both labels."""
    return [
        LabeledRow(
            row=i + 1,
            query=f"What is item {i}?" + " Tell me." * (i % 3),
            context=f"Item {i} is the thing numbered {i * 7}." + " It is blue." * ((5 * i) % 4),
            label="memorized" if i % 2 else "grounded",
        )
        for i in range(n)
    ]


def write_csv(path: Path, rows: list[LabeledRow]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["query", "context", "label"])
        for r in rows:
            w.writerow([r.query, r.context, r.label])
    return path


def evaluate_args(data: Path, out: Path, folder: Path) -> list[str]:
    return [
        "evaluate", str(data), "--out", str(out), "--model", str(folder), "--device", "cpu",
        "--detectors", DETECTORS, "--max-new-tokens", "6", "--batch-size", "3", "--bootstrap", "50",
    ]  # fmt: skip


def assert_rows_equal(ray_rows: list[dict], local_rows: list[dict]) -> None:
    """Same rows in the same order, each once; answers identical, every number equal to float tolerance."""
    assert [r["row"] for r in ray_rows] == [r["row"] for r in local_rows]
    assert len({r["row"] for r in ray_rows}) == len(ray_rows)
    for a, b in zip(ray_rows, local_rows):
        assert a["rag_answer"] == b["rag_answer"] and a["verdict"] == b["verdict"]
        assert a["repcs_score"] == pytest.approx(b["repcs_score"], rel=1e-6, abs=1e-7)
        assert set(a["scores"]) == set(b["scores"])
        for name, value in b["scores"].items():
            assert a["scores"][name] == pytest.approx(value, rel=1e-6, abs=1e-7), name
        if "noisy_z" in b:
            np.testing.assert_allclose(a["noisy_z"]["z"], b["noisy_z"]["z"], rtol=1e-6, atol=1e-7)


@pytest.fixture(scope="module")
def data_csv(tmp_path_factory) -> Path:
    return write_csv(tmp_path_factory.mktemp("scale") / "rows.csv", labeled_rows(10))


@pytest.fixture(scope="module")
def local_cli_report(data_csv, tiny_folder, tmp_path_factory) -> dict:
    """``python -m core evaluate`` without --ray, in a fresh interpreter that must never import Ray."""
    out = tmp_path_factory.mktemp("local") / "local.json"
    code = (
        "import sys\nfrom core.cli import main\n"
        f"rc = main({evaluate_args(data_csv, out, tiny_folder)!r})\n"
        "print('RAY_IMPORTED' if any(m == 'ray' or m.startswith('ray.') for m in sys.modules) else 'NO_RAY')\n"
        "sys.exit(rc)\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}  # one thread, as each CPU actor has
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "NO_RAY"
    return json.loads(out.read_text(encoding="utf-8"))


def test_local_evaluate_never_imports_ray(local_cli_report):
    assert local_cli_report["n"] == 10 and "ray" not in local_cli_report


def test_cli_evaluate_on_ray_equals_local(ray_session, data_csv, tiny_folder, local_cli_report, tmp_path, capsys):
    out = tmp_path / "ray.json"
    assert main([*evaluate_args(data_csv, out, tiny_folder), "--ray", "--workers", "2"]) == 0
    report = json.loads(out.read_text(encoding="utf-8"))
    stats = report.pop("ray")
    assert stats["workers"] == 2 and stats["items"] == 10 and stats["device"] == "cpu"
    assert stats["batches"] == 4  # 10 rows in batches of at most 3, as planned locally
    assert_rows_equal(report["rows"], local_cli_report["rows"])
    # metrics, CIs, the out-of-fold fitted detector and the robustness table: computed on the driver as today
    assert report["detectors"].keys() == local_cli_report["detectors"].keys()
    for name, m in local_cli_report["detectors"].items():
        assert report["detectors"][name]["auc"] == pytest.approx(m["auc"], abs=1e-9, nan_ok=True), name
        assert report["detectors"][name]["auc_ci"] == pytest.approx(m["auc_ci"], abs=1e-9, nan_ok=True), name
    assert json.dumps(report["robustness"]) == json.dumps(local_cli_report["robustness"])
    err = capsys.readouterr().err
    assert "ray (current): 2 cpu worker(s), 10 rows" in err and "0 actor restart(s)" in err


def test_killed_actor_is_restarted_and_its_batch_rerun(ray_session, tiny_spec, tiny_local):
    import ray

    from core.scale.pool import new_monitor
    from core.scale.ray_eval import evaluate_on_ray

    rows = labeled_rows(16)
    monitor = new_monitor()
    killed = threading.Event()

    def kill_first_actor_once_it_works() -> None:  # kill while the actor is scoring its first batch
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if ray.get(monitor.counts.remote())["attempts"]:
                ray.kill(ray.get(monitor.handles.remote())[0], no_restart=False)
                killed.set()
                return
            time.sleep(0.02)

    threading.Thread(target=kill_first_actor_once_it_works, daemon=True).start()
    done = []
    report = evaluate_on_ray(
        tiny_spec, rows, SETTINGS, detectors=["repcs"], batch_size=1, n_boot=20, workers=1, monitor=monitor,
        progress=lambda d, t: done.append((d, t)),
    )  # fmt: skip
    assert killed.is_set()
    stats = report["ray"]
    assert stats["actor_restarts"] >= 1 and stats["retries"] >= 1
    assert done[-1] == (16, 16) and all(b[0] > a[0] for a, b in itertools.pairwise(done))
    local = evaluate_rows(tiny_local, rows, SETTINGS, detectors=["repcs"], batch_size=1, n_boot=20)
    assert_rows_equal(report["rows"], local["rows"])


def test_layer_sweep_on_ray_equals_local(ray_session, tiny_folder, tiny_local, capsys):
    from core.methods.ablation import layer_sweep
    from core.methods.ablation.degenerate import annotate_report

    args = ["ablate", "--query", QUERY, "--context", CONTEXT, "--sweep", "--eps", "0.5", "--seeds", "2"]
    args += ["--max-new-tokens", "5", "--model", str(tiny_folder), "--device", "cpu", "--json"]
    assert main([*args, "--ray", "local", "--workers", "2"]) == 0
    got = json.loads(capsys.readouterr().out)
    stats = got.pop("ray")
    assert stats["items"] == 1 + 3 * 2 and stats["workers"] == 2
    local = layer_sweep(tiny_local, QUERY, CONTEXT, DualPathSettings(max_new_tokens=5), 0.5, [0, 1], max_new_tokens=5)
    want = annotate_report(local.to_dict())  # the command's report, as `ablate` prints it locally
    got.pop("timings")
    want.pop("timings")
    np.testing.assert_allclose(got.pop("z"), want.pop("z"), rtol=1e-6, atol=1e-7)
    for key in ("z_mean", "z_std", "delta_z_mean", "first_token_logprob", "first_token_logprob_mean"):
        np.testing.assert_allclose(got.pop(key), want.pop(key), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got.pop("first_token_logprob_std"), want.pop("first_token_logprob_std"), atol=1e-6)
    np.testing.assert_allclose(got.pop("first_token_logprob_para"), want.pop("first_token_logprob_para"), atol=1e-6)
    assert got["clean"].pop("z") == pytest.approx(want["clean"].pop("z"), rel=1e-6)
    for key in ("first_token_logprob", "first_token_logprob_para"):
        assert got["clean"].pop(key) == pytest.approx(want["clean"].pop(key), abs=1e-6)
    assert got == json.loads(json.dumps(want))  # answers, changed flags, lengths, layers, settings: identical


def test_sma_through_detect_on_ray_equals_local(ray_session, tiny_folder, capsys):
    args = ["detect", "--query", QUERY, "--context", CONTEXT, "--detectors", "sma", "--json", "--sma-samples", "6"]
    args += ["--sma-max-new-tokens", "4", "--max-new-tokens", "4", "--model", str(tiny_folder), "--device", "cpu"]
    assert main(args) == 0
    local = json.loads(capsys.readouterr().out)["extras"]
    assert main([*args, "--ray", "--workers", "2"]) == 0
    captured = capsys.readouterr()
    remote = json.loads(captured.out)["extras"]
    stats = remote["ray"]
    assert stats["local_batches"] == 0 and stats["items"] >= 2  # every generation planned and run on the actors
    a, b = remote["detectors"]["sma"], local["detectors"]["sma"]
    assert a["score"] == pytest.approx(b["score"], rel=1e-6, abs=1e-9)
    da, db = a["details"], b["details"]
    assert da["reference_answer_on"] == db["reference_answer_on"]
    assert da["reference_answer_off"] == db["reference_answer_off"]
    assert da["labels"] == db["labels"] and da["units"] == db["units"]
    for key in ("beta_on", "beta_off", "ads"):
        np.testing.assert_allclose(da[key], db[key], rtol=1e-6, atol=1e-9)
    assert "batches of generations" in captured.err


@pytest.mark.slow
def test_embedded_model_two_workers_equals_local(ray_session, embedded_handle):
    from core.evaluation import read_labeled_csv
    from core.io import asset_path
    from core.scale.ray_eval import evaluate_on_ray
    from core.scale.spec import ModelSpec

    probes = read_labeled_csv(asset_path("probes", "probes.csv"))
    rows = [r for r in probes if r.label == "memorized"][:3] + [r for r in probes if r.label == "grounded"][:3]
    settings = DualPathSettings(max_new_tokens=8, score_window=8)
    report = evaluate_on_ray(
        ModelSpec(device="cpu"), rows, settings, detectors=["repcs", "zlib"], batch_size=2, n_boot=20, workers=2
    )
    assert report["ray"]["workers"] == 2 and report["ray"]["items"] == 6
    local = evaluate_rows(embedded_handle, rows, settings, detectors=["repcs", "zlib"], batch_size=2, n_boot=20)
    assert_rows_equal(report["rows"], local["rows"])
