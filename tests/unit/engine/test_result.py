"""core.engine.result.result_digest: the one identity of a DualPathResult."""

from __future__ import annotations

import dataclasses
import hashlib
import json

from core.engine import DualPathResult, DualPathSettings, run_dual_path
from core.engine.result import result_digest

QUERY, CONTEXT = "Where is the tower?", "The tower stands in Quillmere."


def _run(tiny_handle, **settings):
    s = DualPathSettings(**{"max_new_tokens": 3, "score_window": 3, "top_k": 2, **settings})
    return run_dual_path(tiny_handle, QUERY, CONTEXT, s)


def test_the_digest_is_sha1_of_the_results_identity_and_survives_json(tiny_handle):
    result = _run(tiny_handle)
    fields = [result.model, result.retrieval.prompt, result.parametric.prompt, result.answer_token_ids]
    payload = json.dumps([*fields, result.settings], sort_keys=True, ensure_ascii=False)
    assert result_digest(result) == hashlib.sha1(payload.encode("utf-8")).hexdigest()[:16]
    assert result_digest(DualPathResult.from_json(result.to_json())) == result_digest(result)


def test_the_digest_changes_with_the_settings_and_the_answer(tiny_handle):
    result = _run(tiny_handle)
    assert result_digest(_run(tiny_handle, top_k=3)) != result_digest(result)
    other_answer = dataclasses.replace(
        result, retrieval=dataclasses.replace(result.retrieval, token_ids=[*result.answer_token_ids, 0])
    )
    assert result_digest(other_answer) != result_digest(result)
