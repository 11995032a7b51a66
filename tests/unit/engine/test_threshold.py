"""core.engine.threshold: the one loader (its checks, for the app's bytes and the CLI's path), the one τ
resolver (session → file → user folder → bundled → the model's own → none) and the words for the τ in force."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from core.engine.tau_resolution import (
    ORIGIN_BUNDLED,
    ORIGIN_FILE,
    ORIGIN_NONE,
    ORIGIN_SESSION,
    ORIGIN_USER,
    resolve_tau,
    user_threshold_path,
)
from core.engine.threshold import (
    EMBEDDED_THRESHOLD,
    TAU_PAPER,
    Threshold,
    describe_in_force,
    load_threshold,
)
from core.model.loading import EMBEDDED_NAME

ROOT = Path(__file__).resolve().parents[3]


def _file(tmp_path: Path, **fields) -> Path:
    data = {"tau": 4.0, "T": 64, "model": "some/model", **fields}
    path = tmp_path / "tau.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.mark.parametrize("tau", [-3.0, 0.0])
def test_a_tau_that_is_not_positive_is_refused_by_the_one_loader(tmp_path, tau):
    path = _file(tmp_path, tau=tau)
    with pytest.raises(ValueError, match="'tau' must be a positive number of nats"):
        load_threshold(path)
    with pytest.raises(ValueError, match="'tau' must be a positive number of nats"):
        load_threshold(path.read_bytes())  # an upload on the Evaluate page: same check
    with pytest.raises(ValueError, match="positive"):
        Threshold.from_dict({"tau": tau, "T": 64, "model": "m"})  # the session's stored τ: same check


def test_a_tau_of_another_model_is_refused_for_the_cli_path_and_the_app_bytes(tmp_path):
    path = _file(tmp_path, model="other/model")
    with pytest.raises(ValueError, match=r"calibrated for other/model, not for the loaded model \(some/model\)"):
        load_threshold(path, "some/model")
    with pytest.raises(ValueError, match="calibrated for other/model"):
        load_threshold(path.read_bytes(), "some/model")
    assert load_threshold(path, "other/model").tau == 4.0
    with pytest.raises(ValueError, match="calibrated for other/model"):
        resolve_tau("some/model", file=path)


def test_resolve_tau_goes_session_then_file_then_user_folder_then_bundled(tmp_path):
    own = Threshold(tau=1.5, alpha=0.05, T=64, model=EMBEDDED_NAME, source="mine")
    user_dir = tmp_path / "user"
    Threshold(tau=2.5, alpha=0.05, T=64, model=EMBEDDED_NAME, source="saved").save(
        user_threshold_path(user_dir, EMBEDDED_NAME)
    )
    path = _file(tmp_path, tau=3.5, model=EMBEDDED_NAME)
    found = resolve_tau(EMBEDDED_NAME, session=(own, "chosen here"), file=path, user_dir=user_dir)
    assert (found.threshold.tau, found.source, found.origin) == (1.5, "chosen here", ORIGIN_SESSION)
    found = resolve_tau(EMBEDDED_NAME, file=path, user_dir=user_dir)
    assert (found.threshold.tau, found.origin) == (3.5, ORIGIN_FILE) and str(path) in found.source
    found = resolve_tau(EMBEDDED_NAME, user_dir=user_dir)
    assert (found.threshold.tau, found.origin) == (2.5, ORIGIN_USER)
    found = resolve_tau(EMBEDDED_NAME)
    assert found.origin == ORIGIN_BUNDLED and found.threshold == Threshold.load(EMBEDDED_THRESHOLD)
    other = resolve_tau("some/model")  # never the embedded model's τ: none, and how to calibrate
    assert other.threshold is None and other.origin == ORIGIN_NONE
    assert "not calibrated for this model" in other.source and "calibrate-model" in other.source
    with pytest.raises(ValueError, match="calibrated for"):
        resolve_tau("some/model", session=(own, "chosen here"))  # a session τ of another model is refused
    paper = resolve_tau(EMBEDDED_NAME, session=(Threshold.load(EMBEDDED_THRESHOLD), "x"), mode=TAU_PAPER)
    assert paper.threshold.length_tau is None and paper.threshold.tau == found.threshold.tau


def test_the_tau_in_force_is_never_called_length_aware_when_it_is_constant():
    bundled = Threshold.load(EMBEDDED_THRESHOLD)
    constant = bundled.for_mode(TAU_PAPER)
    assert describe_in_force(constant) == f"τ = {bundled.tau:.3f} nats (T = {bundled.T}), one constant τ"
    assert "length-aware" not in describe_in_force(constant)
    lt = bundled.length_tau
    text = describe_in_force(bundled, 12)
    assert text.startswith("length-aware τ(L)") and f"τ(12) = {lt.tau(12):.3f} nats for this answer" in text
    assert f"from {lt.tau(lt.L_min):.2f} to {lt.tau(lt.L_max):.2f} nats (L = {lt.L_min}–{lt.L_max}" in text
    assert describe_in_force(None) == "no τ (uncalibrated)"


def test_the_engine_needs_no_exception_to_the_layer_contract():
    """Z, τ and the verdict live in the engine: pyproject lists no engine → methods exception (issue 22)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    layers = [c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    assert layers and all(not c.get("ignore_imports") for c in layers)
    for path in (ROOT / "core" / "engine").glob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert "from core.methods" not in text and "import core.methods" not in text, path.name
