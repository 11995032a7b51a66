"""``python -m core run --json``: the exact set of keys users rely on (schema 1's keys plus schema_version)."""

from __future__ import annotations

import json

import pytest

import core.cli.common
from core.cli import main
from core.engine import SCHEMA_VERSION

RUN_JSON_KEYS = [
    "model",
    "model_info",
    "query",
    "context",
    "template",
    "settings",
    "rag_prompt",
    "parametric_prompt",
    "rag_prompt_len",
    "parametric_prompt_len",
    "rag_answer",
    "parametric_answer",
    "answer_token_ids",
    "answer_tokens",
    "parametric_token_ids",
    "parametric_tokens",
    "rag_finish",
    "parametric_finish",
    "token_kl",
    "entropy_rag",
    "entropy_para",
    "logprob_rag",
    "logprob_para",
    "topk_ids_rag",
    "topk_ids_para",
    "topk_probs_rag",
    "topk_probs_para",
    "topk_tokens_rag",
    "topk_tokens_para",
    "score_window",
    "repcs_score",
    "threshold",
    "threshold_source",
    "verdict",
    "kl_stats",
    "max_abs_log_ratio",
    "warnings",
    "timings",
    "extras",
    "schema_version",
]
SETTINGS_KEYS = ["max_new_tokens", "score_window", "top_k", "template", "force_length", "kl_split"]


@pytest.fixture
def run_json(tiny_handle, monkeypatch, capsys):
    monkeypatch.setattr(core.cli.common, "load_model", lambda *a, **k: tiny_handle)
    argv = [
        "run",
        "--query",
        "Where is the tower?",
        "--context",
        "The tower stands in Quillmere.",
        "--max-new-tokens",
        "4",
        "--json",
    ]
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_run_json_has_exactly_the_pinned_keys_in_order(run_json):
    assert list(run_json) == RUN_JSON_KEYS
    assert run_json["schema_version"] == SCHEMA_VERSION == 2
    assert list(run_json["settings"]) == SETTINGS_KEYS
    assert run_json["settings"]["max_new_tokens"] == 4 and run_json["score_window"] == 4


def test_run_text_summary(tiny_handle, monkeypatch, capsys):
    monkeypatch.setattr(core.cli.common, "load_model", lambda *a, **k: tiny_handle)
    assert main(["run", "--query", "Where?", "--context", "Here.", "--max-new-tokens", "3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("model:       tiny-random-llama") and "verdict:" in out


def test_bad_flags_are_an_error_line_not_a_traceback(tiny_handle, monkeypatch, capsys):
    monkeypatch.setattr(core.cli.common, "load_model", lambda *a, **k: tiny_handle)
    assert main(["run", "--query", "Where?", "--context", "Here.", "--top-k", "0"]) == 2
    assert capsys.readouterr().err.startswith("error: top_k must be between 1 and 100")
