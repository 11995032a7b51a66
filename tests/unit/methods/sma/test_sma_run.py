"""SMA runs on the tiny random Llama (core.methods.sma.run): the same perturbed query with and without the
context, response scores recomputed by hand, JSON, the context ablation, the detector, and seeds that hold
whatever else runs in the process."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from core.methods.sma import (
    CONTEXT,
    QUERY,
    SMAResult,
    SMASettings,
    run_context_ablation,
    run_sma,
    unicode_perturb,
)
from core.model.embedder import embed


@pytest.fixture(scope="module")
def tiny_sma(tiny_handle):
    progress: list[tuple[int, int, str]] = []
    settings = SMASettings(n_samples=6, max_new_tokens=4, scope="query+context", batch_size=4)
    result = run_sma(
        tiny_handle, "Who founded Veltria?", "Ada founded it. Marrowgate is old.", settings,
        on_progress=lambda d, t, s: progress.append((d, t, s)),
    )  # fmt: skip
    return result, progress


def test_run_uses_the_same_perturbed_query_with_and_without_the_context(tiny_sma) -> None:
    result, progress = tiny_sma
    nq = int(result.query_mask.sum())
    assert [u.text for u in result.units if u.segment == QUERY] == ["Who", " founded", " Veltria?"]
    assert [u.segment for u in result.units][nq:] == [CONTEXT] * (len(result.units) - nq)
    assert [s.mask[:nq] for s in result.on.samples] == [s.mask for s in result.off.samples]
    assert "Ada founded" in result.on.prompt and "Ada founded" not in result.off.prompt
    np.testing.assert_array_equal(result.beta_off[nq:], 0.0)
    np.testing.assert_allclose(result.ads, result.beta_on - result.beta_off)
    assert progress[-1][0] == progress[-1][1] == (1 + 6) * 2, "progress reaches the planned total"
    assert result.membership_score() == pytest.approx(np.abs(result.ads[:nq]).mean())


def test_run_response_scores_by_hand(tiny_sma) -> None:
    """Every recorded r equals γ₁·Len(ŷ⁽ⁱ⁾)/Len(ŷ) + γ₂·cos(embed(ŷ⁽ⁱ⁾), embed(ŷ)), recomputed independently."""
    result, _ = tiny_sma
    for run in (result.on, result.off):
        ref = embed([run.reference_answer])[0].astype(np.float64)
        answers = embed([s.answer for s in run.samples]).astype(np.float64)
        for sample, e in zip(run.samples, answers):
            sim = float(e @ ref)
            expected = 0.5 * sample.n_tokens / max(1, run.reference_tokens) + 0.5 * sim
            assert sample.similarity == pytest.approx(sim, abs=1e-5)
            assert sample.score == pytest.approx(expected, abs=1e-5)


def test_run_json_round_trip_and_labels(tiny_sma) -> None:
    result, _ = tiny_sma
    again = SMAResult.from_dict(json.loads(json.dumps(result.to_dict())))
    np.testing.assert_allclose(again.ads, result.ads)
    assert again.labels(tau=0.05, first_tier="on") == result.labels(tau=0.05, first_tier="on")
    assert len(again.on.samples) == 6
    with pytest.raises(ValueError, match="first_tier"):
        result.labels(first_tier="both")


def test_reference_input_mode_and_errors(tiny_handle) -> None:
    settings = SMASettings(n_samples=3, max_new_tokens=3, reference="input", method="lime")
    result = run_sma(tiny_handle, "Who?", "Ada.", settings)
    sample = result.off.samples[0]
    perturbed = "".join(u.text if m == "1" else unicode_perturb(u.text) for u, m in zip(result.units, sample.mask))
    n_input = len(tiny_handle.tokenizer(perturbed, add_special_tokens=False)["input_ids"])
    assert sample.length_ratio == pytest.approx(sample.n_tokens / n_input)
    with pytest.raises(ValueError, match="context is empty"):
        run_sma(tiny_handle, "Who?", " ", settings)
    with pytest.raises(ValueError, match="Too long"):
        run_sma(tiny_handle, "Who " * 300, "Ada.", settings)


def test_settings_validation() -> None:
    SMASettings().validate()
    for bad, match in (
        ({"n_samples": 0}, "n_samples"),
        ({"method": "kernelshap"}, "method"),
        ({"scope": "context"}, "scope"),
        ({"alpha": 0.0}, "alpha"),
        ({"template": "nope"}, "template"),
        ({"gamma_length": float("nan")}, "finite"),
    ):
        with pytest.raises(ValueError, match=match):
            SMASettings(**bad).validate()


def test_context_ablation(tiny_handle) -> None:
    ablation = run_context_ablation(
        tiny_handle, "Who founded it?", "Ada founded it. It is old. Very old!", SMASettings(max_new_tokens=3)
    )
    assert ablation.sentences == ["Ada founded it.", " It is old.", " Very old!"]
    assert ablation.full_score == pytest.approx(1.0, abs=1e-5), "the full answer against itself: γ₁·1 + γ₂·1"
    np.testing.assert_allclose(ablation.delta, ablation.full_score - ablation.scores)
    assert len(ablation.answers) == 3
    json.dumps(ablation.to_dict())


def test_detector_is_registered_and_uses_settings_from_the_cache(tiny_handle) -> None:
    from core.detectors.keys import SMA_SETTINGS as SETTINGS_KEY
    from core.detectors.registry import DetectorInput, available
    from core.engine import DualPathSettings, run_dual_path

    detector = available()["sma"]
    assert detector.cost == "heavy" and detector.higher_means == "grounded"
    settings = DualPathSettings(max_new_tokens=2)
    res = run_dual_path(tiny_handle, "Who?", "Ada.", settings, free_parametric=False)
    inp = DetectorInput(tiny_handle, res, settings, cache={SETTINGS_KEY: SMASettings(n_samples=3, max_new_tokens=2)})
    score = detector.score(inp)
    assert score == pytest.approx(inp.cache["sma"]["membership_score"])
    assert len(inp.cache["sma"]["labels"]) == len(inp.cache["sma"]["units"]) == 1


# ----------------------------------------------------------------------------------------------------------
# Seeds hold under concurrency


def _comparable(result: SMAResult) -> dict[str, Any]:
    """The result's JSON without wall times."""
    data = result.to_dict()
    data.pop("timings")
    for run in ("on", "off"):
        data[run].pop("seconds")
    return data


def test_concurrent_seeded_shapley_runs_equal_a_solo_run(tiny_handle) -> None:
    """Two threads running the same seeded Shapley SMA (and a third with another seed) on the shared handle
    give exactly the solo run's result: the permutations come from a generator local to each run."""
    query, context = "Who founded Veltria?", "Ada founded it."
    settings = SMASettings(method="shapley", n_samples=3, max_new_tokens=3, batch_size=2, seed=7)
    solo = _comparable(run_sma(tiny_handle, query, context, settings))
    barrier = threading.Barrier(3)

    def worker(seed: int) -> dict[str, Any]:
        barrier.wait()
        return _comparable(run_sma(tiny_handle, query, context, SMASettings(**{**settings.to_dict(), "seed": seed})))

    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = [pool.submit(worker, seed) for seed in (7, 7, 8)]
        results = [f.result() for f in futures]
    assert results[0] == solo
    assert results[1] == solo
