"""SMA units, perturbations and masks (core.methods.sma.units): pure, no model except the tokenizer."""

from __future__ import annotations

import numpy as np
import pytest

from core.methods.sma import baseline_of, draw_masks, split_units, unicode_perturb


@pytest.mark.parametrize(
    "text",
    [
        "What is the capital of Veltria?",
        "  Two  spaces\tand\nnewlines.  ",
        "Dr. Ada said: «Ja!» Then… she left.\n\nEnd",
        "emoji 🏰 and RTL שלום",
        "x",
    ],
)
@pytest.mark.parametrize("granularity", ["token", "word", "sentence"])
def test_units_concatenate_to_the_text(text: str, granularity: str, tiny_handle) -> None:
    units = split_units(text, granularity, tiny_handle.tokenizer)
    assert "".join(units) == text and all(units)


def test_word_and_sentence_units() -> None:
    assert split_units("What is the capital?", "word") == ["What", " is", " the", " capital?"]
    assert split_units("It rains. It pours! Done", "sentence") == ["It rains.", " It pours!", " Done"]
    assert split_units("Line one\nLine two.", "sentence") == ["Line one", "\nLine two."], (
        "whitespace starts the next unit"
    )
    with pytest.raises(ValueError, match="granularity"):
        split_units("x", "paragraph")


def test_token_units_need_a_tokenizer() -> None:
    assert split_units("", "token") == []
    with pytest.raises(ValueError, match="tokenizer"):
        split_units("x", "token")


def test_unicode_perturbation_changes_every_letter_and_keeps_whitespace() -> None:
    text = " Paris 2024, é!"
    out = unicode_perturb(text)
    assert out != text and len(out) == len(text) + 1  # é gets a combining mark
    assert not any(c.isascii() and c.isalnum() for c in out)
    assert [i for i, c in enumerate(out) if c == " "] == [0, 6, 12]
    assert baseline_of(" word", "remove") == ""
    with pytest.raises(ValueError, match="perturbation"):
        baseline_of("x", "shuffle")


def test_masks_are_uniform_binary_with_no_empty_row() -> None:
    masks = draw_masks(500, 1, np.random.default_rng(0))
    assert masks.shape == (500, 1) and np.all(masks == 1), "a one-unit all-zero mask gets its 1 (Alg. 1)"
    masks = draw_masks(4000, 8, np.random.default_rng(1))
    assert set(np.unique(masks)) == {0, 1} and masks.sum(axis=1).min() >= 1
    assert masks.mean() == pytest.approx(0.5, abs=0.02)
    np.testing.assert_array_equal(
        draw_masks(5, 3, np.random.default_rng(9)), draw_masks(5, 3, np.random.default_rng(9))
    )
    with pytest.raises(ValueError, match="no units"):
        draw_masks(3, 0, np.random.default_rng(0))
