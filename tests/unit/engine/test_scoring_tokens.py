"""core.engine.scoring (issue 14): no "�" where the token limit cuts a multi-byte character."""

from __future__ import annotations

import numpy as np

from core.engine.prepare import Prompt
from core.engine.scoring import Answer, PathStats, _path_output


def test_a_cut_multibyte_character_is_not_shown_as_a_replacement_character(tiny_handle) -> None:
    ids = tiny_handle.tokenizer.encode("Café", add_special_tokens=False)[:-1]  # the limit cut "é" in half
    assert tiny_handle.tokenizer.decode(ids).endswith("\ufffd"), "the byte tokenizer shows the cut"
    n = len(ids)
    stats = PathStats(np.zeros(n, np.float32), np.zeros(n, np.float32), np.zeros((n, 1), np.int64), np.ones((n, 1)))
    out = _path_output(tiny_handle, Prompt("p", [1]), Answer(list(ids), "length"), stats)
    assert out.answer == "Caf" and out.token_ids == list(ids)
