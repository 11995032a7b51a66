"""The public policy's per-run token budget (issue 25 item 10): one click's generations across every cap."""

from __future__ import annotations

import pytest

from core.public import CAP_ENV, PUBLIC_ENV, Caps, PublicPolicy, evaluate_run_tokens, looks_like_path


def test_the_issue_example_is_refused_before_it_runs() -> None:
    """Evaluate with SMA on 200 rows (the row cap) at 32 new tokens: every other cap allowed it."""
    policy = PublicPolicy.from_env({PUBLIC_ENV: "1"})
    tokens = evaluate_run_tokens(Caps().evaluate_rows, 32, ["free", "forward", "heavy"])
    assert tokens == 200 * (32 + 2 * (64 + 1) * 32)  # the answer + SMA's masked answers on both paths
    verdict = policy.run_budget(tokens)
    assert not verdict.ok and verdict.budget == Caps().run_tokens
    assert f"{tokens:,}" in verdict.message and "over this public app's budget of 50,000" in verdict.message


def test_runs_within_the_budget_start_and_say_what_they_cost() -> None:
    policy = PublicPolicy.from_env({PUBLIC_ENV: "1", CAP_ENV["run_tokens"]: "20000"})
    assert policy.caps.run_tokens == 20_000 and "at most 20,000 generated tokens per run" in policy.describe()[0]
    tokens = evaluate_run_tokens(146, 128, ["forward", "forward"])
    verdict = policy.run_budget(tokens)
    assert verdict.ok and tokens == 146 * 128 and "18,688 tokens" in verdict.message and "20,000" in verdict.message
    assert not policy.run_budget(evaluate_run_tokens(146, 128, ["generate"])).ok  # a second answer per row
    private = PublicPolicy.from_env({}).run_budget(10**9)
    assert private.ok and private.budget is None and "1,000,000,000 tokens" in private.message


def test_the_other_pages_caps_fit_inside_the_default_budget() -> None:
    """SMA's page (masks × two paths × answer length) and a single-layer sweep stay under the budget by their own
    caps, so only the Evaluate page needs the explicit check."""
    caps = Caps()
    sma_page = 2 * (caps.sma_masks + 1) * caps.max_new_tokens
    sweep = caps.sweep_layers * caps.max_new_tokens
    assert sma_page <= caps.run_tokens and sweep <= caps.run_tokens


def test_a_top_level_hub_id_is_refused_as_off_the_list_not_as_a_folder(tmp_path, monkeypatch) -> None:
    """``gpt2`` is a hub id (no organisation), not a path: the refusal names the allow-list, not folders."""
    monkeypatch.chdir(tmp_path)
    policy = PublicPolicy.from_env({PUBLIC_ENV: "1"})
    assert not looks_like_path("gpt2") and not looks_like_path("distilgpt2")
    assert looks_like_path("a/b/c") and looks_like_path("./gpt2")
    (tmp_path / "gpt2").mkdir()
    assert looks_like_path("gpt2"), "an existing folder of that name is a path"
    with pytest.raises(ValueError, match=r"^This public app loads only the embedded model\.$"):
        policy.check_model("distilgpt2")
