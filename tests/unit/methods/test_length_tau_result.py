"""The verdict of a run under τ(L): the result's verdict keys, the JSON of schema 3, and results of older schemas."""

from __future__ import annotations

import json

import pytest

from core.engine import SCHEMA_VERSION, DualPathResult, DualPathSettings, run_dual_path
from core.engine.result import SCHEMA_KEYS
from core.engine.threshold import TAU_LENGTH, TAU_PAPER, LengthTau, Threshold
from core.engine.verdict import INCONCLUSIVE, READ, RECALLED, UNCALIBRATED

QUERY, CONTEXT = "Where is the tower?", "The tower stands in Quillmere."


def _threshold(L_min: int = 1, L_max: int = 64) -> Threshold:
    """τ(L) = 1e-3 · L with a band of ±20% (no real run scores that low: the verdict is "read" in range)."""
    lt = LengthTau(
        intercept=-6.907755,
        slope=1.0,
        alpha=0.05,
        L_min=L_min,
        L_max=L_max,
        n=50,
        band_level=0.9,
        boot_intercept=(-6.907755 - 0.2, -6.907755, -6.907755 + 0.2),
        boot_slope=(1.0, 1.0, 1.0),
    )
    return Threshold(tau=1e6, alpha=0.05, T=4, model="tiny", source="test", length_tau=lt)


@pytest.fixture
def settings():
    return DualPathSettings(max_new_tokens=4, score_window=4)


def test_run_carries_tau_of_its_length_the_band_and_the_reason(tiny_handle, settings):
    res = run_dual_path(tiny_handle, QUERY, CONTEXT, settings, threshold=_threshold(), free_parametric=False)
    n = min(4, res.n_tokens)
    assert res.n_scored == n and res.tau_mode == TAU_LENGTH
    assert res.threshold == pytest.approx(1e-3 * n, rel=1e-5)  # τ(L), not the constant 1e6
    low, high = res.tau_band
    assert low < res.threshold < high
    expected = INCONCLUSIVE if low <= res.repcs_score <= high else (RECALLED if res.repcs_score < low else READ)
    assert res.repcs_verdict == expected and res.repcs_verdict_reason
    data = json.loads(res.to_json())
    assert data["schema_version"] == SCHEMA_VERSION == 4 and data["tau_band"] == [low, high]
    back = DualPathResult.from_json(res.to_json())
    assert (back.repcs_verdict, back.tau_band, back.tau_mode, back.n_scored) == (
        res.repcs_verdict,
        [low, high],
        TAU_LENGTH,
        n,
    )
    assert back.verdict == res.verdict == res.axes["verdict"], "the headline reads back too"


def test_out_of_range_length_and_paper_setting(tiny_handle, settings):
    out = run_dual_path(tiny_handle, QUERY, CONTEXT, settings, threshold=_threshold(40, 64), free_parametric=False)
    assert out.repcs_verdict == INCONCLUSIVE and "shorter" in out.repcs_verdict_reason
    paper = run_dual_path(
        tiny_handle, QUERY, CONTEXT, settings, threshold=_threshold().for_mode(TAU_PAPER), free_parametric=False
    )
    assert paper.tau_mode == TAU_PAPER and paper.tau_band is None and paper.threshold == 1e6
    assert paper.repcs_verdict == (RECALLED if paper.repcs_score < 1e6 else READ)
    assert not any("no length-aware calibration" in w for w in paper.warnings)
    legacy = Threshold(tau=1e6, alpha=0.05, T=4, model="tiny", source="old file")
    old = run_dual_path(tiny_handle, QUERY, CONTEXT, settings, threshold=legacy, free_parametric=False)
    assert old.tau_mode == TAU_PAPER and any("no length-aware calibration" in w for w in old.warnings)


def test_results_of_schema_2_read_back_with_todays_verdicts(tiny_handle, settings):
    res = run_dual_path(tiny_handle, QUERY, CONTEXT, settings, threshold=_threshold(), free_parametric=False)
    for old_verdict, new_verdict in (("memorized", RECALLED), ("grounded", READ), ("uncalibrated", UNCALIBRATED)):
        data = res.to_dict()
        for key in (*SCHEMA_KEYS[3], *SCHEMA_KEYS[4]):
            del data[key]
        data.update(schema_version=2, verdict=old_verdict, threshold=6.7)
        back = DualPathResult.from_dict(json.loads(json.dumps(data)))
        assert back.repcs_verdict == new_verdict and back.schema_version == SCHEMA_VERSION
        assert back.axes is None and back.verdict == res.verdict, "an old file's headline: computed from its numbers"
        assert back.tau_mode == TAU_PAPER and back.tau_band is None
        assert back.n_scored == min(4, len(data["answer_token_ids"]))
    data = res.to_dict()
    data["verdict"] = "maybe"
    with pytest.raises(ValueError, match="unknown verdict"):
        DualPathResult.from_dict(data)


def test_cli_tau_mode_chooses_how_the_default_tau_is_applied(tiny_handle, monkeypatch, capsys, tmp_path):
    from dataclasses import replace

    import core.cli.common
    from core.cli import main
    from core.engine.threshold import EMBEDDED_THRESHOLD
    from core.model import calibration_store

    # the model's own τ(L), as calibrate-model stores it (no model borrows another's τ)
    monkeypatch.setenv("READ_OR_RECALL_CACHE", str(tmp_path))
    folder = calibration_store.claim_folder(tiny_handle, "chat")
    replace(Threshold.load(EMBEDDED_THRESHOLD), model=tiny_handle.info.name).save(folder / calibration_store.TAU_FILE)
    monkeypatch.setattr(core.cli.common, "load_model", lambda *a, **k: tiny_handle)
    argv = ["run", "--query", QUERY, "--context", CONTEXT, "--max-new-tokens", "4", "--json"]
    assert main([*argv, "--tau-mode", "paper"]) == 0
    paper = json.loads(capsys.readouterr().out)
    assert paper["tau_mode"] == TAU_PAPER and paper["tau_band"] is None
    assert main(argv) == 0
    default = json.loads(capsys.readouterr().out)
    assert default["tau_mode"] == TAU_LENGTH and default["repcs_verdict"] in {INCONCLUSIVE, READ, RECALLED}
    assert default["threshold"] != paper["threshold"]  # τ(L) at this answer's L, not the constant τ
