"""core.engine.turns: a plain-template answer ends where the model begins a turn of its own (issue 42: Gemma 3
270M wrote "French\\n\\nQuestion: what language is … Answer: French …" on 210 of 290 typed rows)."""

from __future__ import annotations

import torch
from transformers import LogitsProcessor, LogitsProcessorList

from core.engine import DualPathSettings
from core.engine.generation import generate_greedy
from core.engine.turns import TURN, answer_end, turn_pattern, turn_start
from core.model.prompts import TEMPLATES


def test_each_plain_template_names_the_labels_it_writes_and_a_chat_template_none():
    assert TEMPLATES["A"].turn_labels == ("Context", "Question", "Answer")
    assert TEMPLATES["D"].turn_labels == ("Text", "Question", "Answer")
    assert TEMPLATES["chat"].turn_labels == ()


def test_the_pattern_is_the_template_s_and_none_for_a_chat_template_or_a_forced_length(tiny_handle):
    tok = tiny_handle.tokenizer
    assert turn_pattern("auto", tok) is None  # the byte tokenizer has a chat template: its end token ends a turn
    assert turn_pattern("chat", tok) is None
    assert turn_pattern("A", tok, force_length=True) is None
    pattern = turn_pattern("A", tok)
    assert turn_start(pattern, "French\n\nQuestion: what language") == len("French")
    assert turn_start(pattern, "12\n\nExplanation: Mars has") == 2  # a worked answer's field
    assert turn_start(pattern, "Paris. Question: why") is None  # not at the start of a line
    assert turn_start(pattern, "\n\nQuestion:\n\nQuestion:") is None  # nothing said before it: nothing to keep
    assert turn_start(pattern, "The Document: a deed\nDocument: x") is None  # B's label, not A's


def test_the_answer_keeps_the_tokens_before_the_line_and_drops_the_one_holding_its_newline(tiny_handle):
    tok = tiny_handle.tokenizer
    pattern = turn_pattern("A", tok)
    ids = tok("Rome\n\nQuestion: and Spain?\n\nAnswer: Madrid")["input_ids"]
    keep = answer_end(tok, pattern, ids)
    assert tok.decode(ids[:keep]) == "Rome"
    assert answer_end(tok, pattern, tok("Rome is the capital.")["input_ids"]) is None
    assert answer_end(tok, None, ids) is None


class _Script(LogitsProcessor):
    """Forces each row to write its script, one token a step (then its end token)."""

    def __init__(self, scripts: list[list[int]], width: int, eos: int) -> None:
        self.scripts, self.width, self.eos = scripts, width, eos

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        t = input_ids.shape[1] - self.width
        forced = torch.full_like(scores, -1e9)
        for row, script in enumerate(self.scripts):
            forced[row, script[t] if t < len(script) else self.eos] = 0.0
        return forced


def _scripted(monkeypatch, handle, prompts, answers):
    tok = handle.tokenizer
    scripts = [tok(a)["input_ids"] for a in answers]
    width = max(len(p) for p in prompts)
    real = handle.generate
    steps = []

    def generate(**kwargs):
        kwargs["logits_processor"] = LogitsProcessorList([_Script(scripts, width, tok.eos_token_id)])
        out = real(**kwargs)
        steps.append(len(out.logits))
        return out

    monkeypatch.setattr(handle, "generate", generate)
    return steps


def test_generation_stops_a_row_at_its_own_turn_and_keeps_only_the_answer(tiny_handle, monkeypatch):
    tok = tiny_handle.tokenizer
    prompts = [tok("Question: capital of Italy?\n\nAnswer:")["input_ids"], tok("Question: x?\n\nAnswer:")["input_ids"]]
    answers = [" Rome\n\nQuestion: capital of Spain?\n\nAnswer: Madrid and more words", " Lyon"]
    steps = _scripted(monkeypatch, tiny_handle, prompts, answers)
    events = []
    settings = DualPathSettings(max_new_tokens=40, score_window=40, template="A")
    out = generate_greedy(tiny_handle, prompts, settings, paths=["a", "b"], on_event=events.append)
    (ids0, logits0, finish0), (ids1, _, finish1) = out
    assert (tok.decode(ids0), finish0) == (" Rome", TURN)
    assert logits0.shape == (len(ids0), tiny_handle.info.vocab_size)  # the kept steps' raw logits only
    assert finish1 == "eos" and tok.decode(ids1, skip_special_tokens=True) == " Lyon"
    assert steps == [len(" Rome\n\nQuestion:")]  # stopped once its own "Question:" was written, not at the cap
    last = {e.path: e for e in events if e.done}
    assert last["a"].text == " Rome"  # the streamed answer ends where the kept one does


def test_a_chat_template_or_a_forced_length_keeps_the_whole_generation(tiny_handle, monkeypatch):
    tok = tiny_handle.tokenizer
    prompts = [tok("Question: capital of Italy?\n\nAnswer:")["input_ids"]]
    answer = " Rome\n\nQuestion: and Spain?"
    _scripted(monkeypatch, tiny_handle, prompts, [answer])
    for settings in (
        DualPathSettings(max_new_tokens=40, score_window=40, template="chat"),
        DualPathSettings(max_new_tokens=len(answer), score_window=8, template="A", force_length=True),
    ):
        ((ids, _, finish),) = generate_greedy(tiny_handle, prompts, settings)
        assert tok.decode(ids, skip_special_tokens=True).startswith(answer) and finish != TURN
