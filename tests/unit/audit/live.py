"""A real ``python -m core serve`` process for the service tests (plain helpers, no fixtures).

The server runs a small random Llama saved as a local model folder (safetensors, the tests' byte tokenizer),
calibrated on :data:`tests.unit.audit.conftest.CLEAN_ROWS`, on its own port and database; its output goes to a
log file that a failing start shows.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import torch

from core.audit.calibration import calibrate
from core.io import REPO_ROOT
from core.model.loading import load_model
from tests.conftest import make_byte_tokenizer
from tests.unit.audit.conftest import AUTH, CLEAN_ROWS, TOKEN


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def model_folder(folder: Path, *, max_positions: int = 512, hidden: int = 32, layers: int = 3) -> Path:
    """A random Llama (seed 0, eager attention) with the byte tokenizer, saved to ``folder``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = make_byte_tokenizer()  # a fresh one of this folder's own
    tokenizer.model_max_length = max_positions
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        tie_word_embeddings=False,
        attn_implementation="eager",
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder


def calibration_file(folder: Path, out: Path) -> Path:
    """An audit calibration of the model in ``folder`` on the clean rows, saved to ``out``."""
    calib, _ = calibrate(load_model(str(folder), device="cpu"), CLEAN_ROWS)
    return calib.save(out)


class LiveServer:
    """``python -m core serve --model FOLDER --calibration FILE --db DB --port P [extra]`` as a subprocess.

    Args:
        extra: more flags; without ``--token-file`` the token is passed as ``READ_OR_RECALL_TOKEN``.
    """

    def __init__(self, folder: Path, calib: Path, db: Path, log: Path, extra: list[str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.db = db
        self.log = log
        self.args = ["--model", str(folder), "--calibration", str(calib), "--db", str(db), "--port", str(self.port)]
        self.args += extra or []
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 180.0) -> LiveServer:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
        if "--token-file" not in self.args:
            env["READ_OR_RECALL_TOKEN"] = TOKEN
        with self.log.open("ab") as fh:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "core", "serve", "--threads", "1", *self.args],
                cwd=REPO_ROOT,
                env=env,
                stdout=fh,
                stderr=fh,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"serve exited with {self.proc.returncode}:\n{self.output()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        self.kill()
        pytest.fail(f"serve did not become healthy in {timeout:.0f} s:\n{self.output()}")

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""

    def post(self, path: str, body: dict, timeout: float = 60.0, **kwargs) -> httpx.Response:
        return httpx.post(f"{self.url}{path}", json=body, headers=AUTH, timeout=timeout, **kwargs)

    def get(self, path: str, timeout: float = 60.0) -> httpx.Response:
        return httpx.get(f"{self.url}{path}", headers=AUTH, timeout=timeout)

    def signal(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)
