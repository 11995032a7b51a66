"""core.methods.work: the units of work of Self-Critique, SMA and the context ablation, before and after a run
(issue 45: SMA's estimate was 2.4–2.7× off between two examples because its work was a token budget, blind to the
prompts its 130 answers read and to how long its answers ran)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from core.engine import estimate as est
from core.engine.cost_meter import GENERATED_TOKEN, PROMPT_TOKEN, CostMeter, Work
from core.methods import work
from core.methods.selfcritique import SelfCritiqueSettings
from core.methods.sma import SMASettings


class WordTokenizer:
    """One token per whitespace-separated word."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(range(len(text.split())))


PRIOR = est.PRIOR_SHARE**0.5
"""A kind's answers before any run of it: the geometric mean of the prior share and the whole budget."""
HANDLE = SimpleNamespace(tokenizer=WordTokenizer(), slug="fake", info=SimpleNamespace(name="fake", device="cpu"))


@pytest.fixture
def meter(monkeypatch) -> CostMeter:
    """A fresh process-wide meter: 0.1 s a decoding step (of a batch of two), 0.01 s a prompt token."""
    fresh = CostMeter()
    fresh.observe(HANDLE, GENERATED_TOKEN, 1.0, 10)
    fresh.observe(HANDLE, PROMPT_TOKEN, 1.0, 100)
    monkeypatch.setattr(est, "METER", fresh)
    return fresh


def test_a_step_of_a_wider_batch_costs_more_in_the_unit_of_a_measured_step() -> None:
    assert work.batched(10, work.STEP_WIDTH) == pytest.approx(10.0)
    assert work.batched(10, 8) == pytest.approx(10 * 2.0 / 1.25)
    assert work.batched(10, 1) == pytest.approx(10 * 1.125 / 1.25)


def test_selfcritique_counts_both_answers_and_both_prompts(meter) -> None:
    settings = SelfCritiqueSettings(max_new_tokens=10, use_context=True, instruction="Check it.")
    planned = work.selfcritique_planned(HANDLE, "Who wrote it?", "Ann wrote it.", settings, first_steps=6)
    one = work.batched(1, 1)
    # r₁: the Dual Path answer's 6 steps; r₂ up to twice r₁'s (12, within its budget of 20), before any run of
    # the kind between the prior share of that and all of it, at their geometric mean
    assert planned.steps == pytest.approx(one * (6 + 12 * PRIOR))
    assert (planned.steps_low, planned.steps_high) == pytest.approx((one * (6 + 12 * est.PRIOR_SHARE), one * 18))
    # r₁ reads the query and context (3 + 3 words + 24 for the template), r₂ the query, instruction and r₁
    assert planned.prompt_tokens == pytest.approx((6 + 24) + (5 + 24 + 6))
    alone = SelfCritiqueSettings(max_new_tokens=10, instruction="Check it.")
    without = work.selfcritique_planned(HANDLE, "Who wrote it?", "Ann wrote it.", alone, first_steps=6)
    assert without.prompt_tokens < planned.prompt_tokens, "without the context r₁ does not read it"
    longer = work.selfcritique_planned(HANDLE, "Who wrote it?", "Ann wrote it.", settings, first_steps=10)
    assert longer.steps == pytest.approx(one * (10 + 20 * PRIOR)), "r₂ follows r₁, at most its own budget"

    result = SimpleNamespace(first_ids=[1] * 6, critique_ids=[1] * 3, first_prompt_len=30, critique_prompt_len=40)
    done, share = work.selfcritique_done(result, settings)
    assert done == Work(one * 9, 70.0) and share == pytest.approx(3 / 12)
    work.observe_fills(HANDLE, work.SELFCRITIQUE, share)
    again = work.selfcritique_planned(HANDLE, "Who wrote it?", "Ann wrote it.", settings, first_steps=8)
    assert again.steps == pytest.approx(one * (8 + 16 * 0.25)), "r₂ as long as the last critique's share of 2 × r₁"


def _sample(n: int) -> SimpleNamespace:
    return SimpleNamespace(n_tokens=n)


def test_sma_reads_its_prompts_and_its_answers_lengths(meter) -> None:
    settings = SMASettings(n_samples=16, batch_size=8, max_new_tokens=32)
    long_context, short_context = " ".join(["word"] * 300), "Short."
    far = work.sma_planned(HANDLE, "Who?", long_context, settings, nq=1, nc=5)
    near = work.sma_planned(HANDLE, "Who?", short_context, settings, nq=1, nc=5)
    assert far.steps == near.steps, "the same batches of answers"
    assert far.prompt_tokens - near.prompt_tokens == pytest.approx((1 + 16) * 299), "each prompt with the context"
    assert work.sma_planned(HANDLE, "", short_context, settings, nq=0, nc=0) == Work()

    run = SimpleNamespace(prompt=" ".join(["w"] * 50), reference_tokens=4, samples=[_sample(3)] * 8 + [_sample(40)])
    off = SimpleNamespace(prompt="w w", reference_tokens=4, samples=[_sample(31)] * 8)
    result = SimpleNamespace(on=run, off=off, settings={"batch_size": 8, "max_new_tokens": 32})
    done, share = work.sma_done(HANDLE, result)
    one = work.batched(5, 1)  # each unperturbed answer: 4 tokens + its end
    steps = 2 * one + work.batched(4, 8) + work.batched(32, 1) + work.batched(32, 8)
    assert done.steps == pytest.approx(steps), "each batch decodes until its longest answer ends (at most the budget)"
    assert done.prompt_tokens == pytest.approx(10 * 50 + 9 * 2)
    assert share == pytest.approx((4 / 32 + 1 + 1) / 3)


def test_after_an_sma_run_on_a_long_context_one_on_a_short_context_is_estimated_shorter(meter) -> None:
    settings = SMASettings(n_samples=16, batch_size=8, max_new_tokens=32)
    far = work.sma_planned(HANDLE, "Who?", " ".join(["word"] * 300), settings, nq=1, nc=5)
    meter.observe_run(HANDLE, work.SMA, 100.0, far)  # as long as its units predicted × some ratio
    near = est.estimate_run(HANDLE, work.SMA, work.sma_planned(HANDLE, "Who?", "Short.", settings, nq=1, nc=5))
    predicted_far = est.predict(HANDLE, far, meter)[0]
    near_work = work.sma_planned(HANDLE, "Who?", "Short.", settings, nq=1, nc=5)
    predicted_near = est.predict(HANDLE, near_work, meter)[0]
    assert near_work.prompt_tokens < far.prompt_tokens
    assert near.seconds == pytest.approx(100.0 * predicted_near / predicted_far)
    assert near.seconds < 100.0 / 1.5, "the short context's prompts cost less to read"


def test_the_context_ablation_counts_its_generations(meter) -> None:
    settings = SMASettings(batch_size=8, max_new_tokens=32)
    planned = work.ablation_planned(HANDLE, "Who?", "One. Two. Three.", settings, sentences=3)
    assert planned.steps == pytest.approx(32 * PRIOR * (work.batched(1, 1) + work.batched(1, 8)))
    assert planned.prompt_tokens == pytest.approx(5 * (1 + 3 + 24))
    ablation = SimpleNamespace(
        query="Who?", context="One. Two. Three.", reference_answer="Ann did", answers=["Ann", "Ann did it", "Bo"]
    )
    done = work.ablation_done(HANDLE, ablation, settings)
    assert done.steps == pytest.approx(work.batched(3, 1) + work.batched(4, 4))
    assert done.prompt_tokens == pytest.approx(5 * 28)


def test_a_kinds_share_is_its_own_and_falls_back_to_other_models() -> None:
    meter = CostMeter()
    meter.observe_fill("a", 16, 64)  # a Dual Path run's answers
    meter.observe_fill("a", 8, 32, work.SMA)
    assert meter.shares("a") == [0.25] and meter.shares("a", work.SMA) == [0.25]
    meter.observe_fill("a", 32, 32, work.SMA)
    assert meter.fill("a", work.SMA) == pytest.approx(0.625) and meter.fill("a") == pytest.approx(0.25)
    assert meter.shares("b", work.SMA) == [0.25, 1.0], "another model's shares as a first run's prior"
    found = est.kind_budget_work("a", work.SMA, 32, meter=meter)
    assert (found.steps, found.steps_low, found.steps_high) == pytest.approx((20.0, 8.0, 32.0))
    with pytest.raises(ValueError, match="non-negative"):
        est.kind_budget_work("a", work.SMA, -1, meter=meter)


def test_before_any_run_of_a_kind_its_answers_are_taken_as_a_dual_path_answer_is() -> None:
    """The first SMA run was estimated at its whole budget (2.08× its time): before any run of a kind, the geometric
    mean of the shortest share recent answers used and the whole budget, the Dual Path run's rule."""
    meter = CostMeter()
    first = est.kind_budget_work("a", work.SMA, 32, meter=meter)  # nothing measured at all: the prior share
    assert (first.steps, first.steps_low, first.steps_high) == pytest.approx(
        ((est.PRIOR_SHARE * 32 * 32) ** 0.5, est.PRIOR_SHARE * 32, 32.0)
    )
    meter.observe_fill("a", 16, 64)  # a Dual Path run used a quarter of its budget
    found = est.kind_budget_work("a", work.SMA, 32, meter=meter)
    assert (found.steps, found.steps_low, found.steps_high) == pytest.approx((16.0, 8.0, 32.0))
    assert found == est.budget_work("a", 32, meter=meter)


def test_the_agreement_views_costly_detectors_declare_their_work(meter) -> None:
    from components.progress import detector_work
    from core.detectors import get
    from core.detectors.registry import DetectorInput
    from core.engine import DualPathSettings

    result = SimpleNamespace(
        query="Who founded it?",
        context=" ".join(["word"] * 200),
        retrieval=SimpleNamespace(token_ids=[1] * 12),
        parametric=SimpleNamespace(token_ids=[1] * 40),
        n_tokens=12,
    )
    inp = DetectorInput(HANDLE, result, DualPathSettings(max_new_tokens=64))
    critique = detector_work(get("selfcritique"), inp)
    assert isinstance(critique, Work)
    # the parametric path: r₁ is the run's own 40-step answer without the context, which r₁ does not read
    assert critique.steps == pytest.approx(work.batched(40 + 80 * PRIOR, 1)), "r₂ up to twice r₁"
    assert critique.prompt_tokens < 200, "the parametric path does not read the context"
    sma = detector_work(get("sma"), inp)
    assert isinstance(sma, Work) and sma.prompt_tokens > 200 * 10, "SMA's perturbed prompts read the context"


def test_the_context_ablation_takes_the_dual_path_answer_s_length_when_the_session_has_it(meter) -> None:
    """On the capital of France the ablation took SMA's share (answers to perturbed prompts, which ran long) for
    answers with the context (8 steps): 4.19× its time. With the session's Dual Path answer on the same inputs, each
    answer is that long (plus its end token), at most SMA's budget."""
    settings = SMASettings(batch_size=8, max_new_tokens=32)
    known = work.ablation_planned(HANDLE, "Who?", "One. Two. Three.", settings, sentences=3, reference_steps=8)
    assert known.steps == pytest.approx(9 * (work.batched(1, 1) + work.batched(1, 8)))
    long = work.ablation_planned(HANDLE, "Who?", "One. Two. Three.", settings, sentences=3, reference_steps=60)
    assert long.steps == pytest.approx(32 * (work.batched(1, 1) + work.batched(1, 8))), "at most SMA's budget"
    unknown = work.ablation_planned(HANDLE, "Who?", "One. Two. Three.", settings, sentences=3)
    assert unknown.steps == pytest.approx(32 * PRIOR * (work.batched(1, 1) + work.batched(1, 8)))
