"""AppTest of the Self-Critique page with the embedded model (short answers to keep it quick)."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from components.text import escape_markdown
from core.methods.selfcritique import DEFAULT_INSTRUCTION, RESPONSE_SLOT, SelfCritiqueResult
from tests.app.conftest import ROOT, ok, open_script

PAGE = str(ROOT / "pages" / "6_Self_Critique.py")
TIMEOUT = 300  # seconds per script run: the embedded model on a busy 2-core CPU
SCRIPT = "<script>alert(1)</script>"

pytestmark = pytest.mark.slow


def _page(max_new_tokens: int = 6) -> AppTest:
    at = open_script(PAGE, TIMEOUT)
    at.number_input(key="ror.w.max_new_tokens").set_value(max_new_tokens).run()
    ok(at)
    return at


def _stored(at: AppTest) -> list[SelfCritiqueResult]:
    return [SelfCritiqueResult.from_dict(d) for d in at.session_state["ror.sc.results"].values()]


def test_self_critique_runs_rescores_without_generating_and_exports() -> None:
    at = _page()
    assert at.title[0].value == "Self-Critique"
    assert at.text_area(key="ror.w.sc.instruction").value == DEFAULT_INSTRUCTION
    at.text_area(key="ror.w.query").input("What is the capital of France?")
    at.button(key="ror.sc.run").click().run()
    ok(at)
    assert not at.error, [e.value for e in at.error]

    (result,) = _stored(at)
    assert 1 <= len(result.first_ids) <= 6 and 1 <= len(result.critique_ids) <= 12, "r₂ gets twice r₁'s budget"
    assert result.first_answer in result.critique_prompt, "the critique prompt quotes r₁"
    codes = [c.value for c in at.code]
    assert result.first_answer in codes and result.critique_answer in codes, "both answers are shown"
    metrics = {m.label: m.value for m in at.metric}
    assert float(metrics["S (high ⇒ contaminated)"]) == pytest.approx(result.score(50), abs=1e-4)
    assert len(at.get("plotly_chart")) == 1, "the two entropy sequences"
    assert len(at.get("download_button")) == 2

    # A different K re-scores the stored generations: no new run, the score follows K.
    generated = result.timings
    at.select_slider(key="ror.w.sc.top_k").set_value("full").run()
    ok(at)
    (again,) = _stored(at)
    assert again.timings == generated, "changing K does not generate again"
    metrics = {m.label: m.value for m in at.metric}
    assert float(metrics["S (high ⇒ contaminated)"]) == pytest.approx(result.score(None), abs=1e-4)


def test_instruction_without_slot_is_refused_and_script_text_stays_literal() -> None:
    at = _page(max_new_tokens=4)
    at.text_area(key="ror.w.query").input(SCRIPT)
    at.text_area(key="ror.w.sc.instruction").input("Answer again differently.")
    at.button(key="ror.sc.run").click().run()
    ok(at)
    # the message names the slot, shown as plain text (markdown-escaped)
    assert RESPONSE_SLOT == "{response}"
    assert any(escape_markdown("{response}") in e.value for e in at.error), [e.value for e in at.error]
    assert "ror.sc.results" not in at.session_state or not at.session_state["ror.sc.results"]

    at.button(key="ror.sc.reset").click().run()
    assert at.text_area(key="ror.w.sc.instruction").value == DEFAULT_INSTRUCTION
    at.button(key="ror.sc.run").click().run()
    ok(at)
    assert not at.error, [e.value for e in at.error]
    assert any(SCRIPT in c.value for c in at.code), "the prompts show the input literally"


def test_the_run_button_has_an_estimate_of_both_generations(tiny_app, monkeypatch) -> None:
    from core.engine import estimate
    from core.methods import work

    meter = estimate.CostMeter()
    meter.observe(tiny_app, estimate.GENERATED_TOKEN, 0.9, 9)  # 0.1 s per step, as if a Dual Path run had been measured
    meter.observe(tiny_app, estimate.PROMPT_TOKEN, 0.1, 100)  # and 1 ms per prompt token read
    monkeypatch.setattr(estimate, "METER", meter)
    at = open_script(PAGE, TIMEOUT)
    at.number_input(key="ror.w.max_new_tokens").set_value(10).run()
    caption = next(c.value for c in at.caption if "on this machine" in c.value)
    # no Dual Path run on these inputs: r₁ from 1.25 steps (the prior shortest share) to 10 (central √12.5 ≈ 3.5),
    # r₂ up to twice r₁'s central 3.5 ≈ 7.1, from its prior share to all of it (central 2.5): 0.9 × 6.0 steps × 0.1 s
    # ≈ 0.54 s, plus the two prompts at 1 ms a token; at most 0.9 × 17.1 × 0.1 s ≈ 1.5 s and the prompts
    assert caption.startswith("< 1 s on this machine (likely under 2 s, depending on the answers' length; no run"), (
        caption
    )
    # a run of this page took 12 s for work whose unit costs predicted 4 s: the next is its ≈ 0.6 s × 3
    meter.observe_run(tiny_app, work.SELFCRITIQUE, 12.0, estimate.Work(steps=40.0))
    at.run()
    caption = next(c.value for c in at.caption if "on this machine" in c.value)
    assert caption == "≈ 2 s on this machine (the last run like it took 12.0 s; scaled to this run)", caption
