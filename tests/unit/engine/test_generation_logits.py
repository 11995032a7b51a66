"""core.engine.generation (issue 17, hardening): each row of a batched generation gets logits of its own."""

from __future__ import annotations

from core.engine import DualPathSettings
from core.engine.generation import generate_greedy

ROWS = [
    ("What is the capital of Veltria?", "The capital of Veltria is Marrowgate."),
    ("Who wrote the Lisk codex?", "The Lisk codex was written by Amel Doru in 1302."),
    ("What color are the trams?", "Trams in Lisk are painted ochre."),
    ("How tall is Mount Perrin?", "Mount Perrin rises 2,114 metres."),
]


def test_each_row_gets_its_own_logits_without_a_stacked_copy(tiny_handle):
    """Old code returned views of one (batch, steps, V) stack: no row's memory could be freed alone."""
    settings = DualPathSettings(max_new_tokens=6, score_window=6, force_length=True)
    prompts = [tiny_handle.tokenizer(q)["input_ids"] for q, _ in ROWS]
    out = generate_greedy(tiny_handle, prompts, settings)
    storages = {logits.untyped_storage().data_ptr() for _, logits, _ in out}
    assert len(storages) == len(ROWS)
    for ids, logits, _ in out:  # and the values are the generation's own: the argmax is the chosen token
        assert logits.shape == (len(ids), tiny_handle.info.vocab_size)
        assert logits.argmax(-1).tolist() == ids
