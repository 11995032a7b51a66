"""The answer span located by the model (core.engine.span): words and their positions, the context-sensitive
head, its sources, a name's growth, and the span's log-probability against an independent sum."""

from __future__ import annotations

import numpy as np
import pytest

from core.engine.span import answer_words, contains, content_words, locate_span, normalize, span_logprob

TOULOUSE = ["T", "oul", "ouse", " is", " a", " city", " in", " the", " continent", " of", " Africa", "."]
TOULOUSE_KL = [0.18, 0.08, 0.0, 0.05, 0.14, 0.20, 0.04, 1.41, 0.06, 0.0, 1.69, 0.24]
QUERY = "Complete the sentence: Toulouse is located in the continent of"
CONTEXT = "Toulouse is a city in the continent of Africa."


def test_words_cover_their_tokens():
    words = answer_words(TOULOUSE)
    assert [w.text for w in words][:3] == ["Toulouse", "is", "a"]
    assert words[0].positions == (0, 1, 2) and words[-1].text == "Africa" and words[-1].positions == (10,)
    assert [w.text for w in answer_words(TOULOUSE, 6)] == ["Toulouse", "is", "a", "city"]  # words starting in 6 tokens


def test_content_words_skip_the_query_and_function_words():
    assert [w.norm for w in content_words(answer_words(TOULOUSE), QUERY)] == ["city", "africa"]


def test_the_head_is_the_first_sourced_word_the_context_moved():
    span = locate_span(
        TOULOUSE, np.array(TOULOUSE_KL), QUERY, context=CONTEXT, parametric_answer="In Europe.", level=1.0
    )
    assert span.text == "Africa" and span.word == "africa" and span.head_positions == (10,)
    assert span.sensitive and span.kl == pytest.approx(1.69) and "κ = 1.00" in span.why
    # "city" comes first and is in the context too, but the context did not move it (KL 0.20 < κ)
    assert [w for w, _ in span.candidates] == ["city", "Africa"]


def test_without_a_word_at_the_level_the_most_moved_sourced_word():
    span = locate_span(TOULOUSE, np.array(TOULOUSE_KL), QUERY, context=CONTEXT, level=5.0)
    assert span.text == "Africa" and not span.sensitive and "none reaches κ = 5.00" in span.why


def test_a_word_with_no_source_is_not_taken_while_one_with_a_source_exists():
    tokens = ["Pierre", " is", " a", " French", " theolog", "ian", "."]
    kl = np.array([0.0, 0.1, 0.1, 0.2, 3.0, 0.1, 0.1])
    span = locate_span(
        tokens, kl, "What is the native language of Pierre?", context="Pierre speaks Dutch.",
        parametric_answer="Pierre is a French artist.", level=1.0,
    )  # fmt: skip
    assert span.word == "french" and span.sourced  # "theologian" is neither in the context nor said without it


def test_a_capitalized_head_grows_over_a_name():
    tokens = ["The", " answer", " is", ":", " George", " Washington", "."]
    kl = np.array([0.9, 1.7, 0.1, 0.6, 2.1, 0.6, 0.7])
    span = locate_span(tokens, kl, "Who was the first president?", context="George Washington was first.", level=1.0)
    assert span.text == "George Washington" and span.word == "george"
    assert span.positions == (4, 5) and span.head_positions == (4,)


@pytest.mark.parametrize(
    ("tokens", "head", "name"),
    [
        (["Leon", "ardo", " da", " Vinci", " painted", " it", "."], 0, "Leonardo da Vinci"),
        (["It", " was", " painted", " by", " Leonardo", " da", " Vin", "ci", "."], 6, "Leonardo da Vinci"),
        (["Ludwig", " van", " Beethoven", " wrote", " it", "."], 0, "Ludwig van Beethoven"),
    ],
)
def test_a_name_grows_over_its_particles(tokens, head, name):
    kl = np.zeros(len(tokens))
    kl[head] = 5.0
    context = "It was painted by Leonardo da Vinci; Ludwig van Beethoven wrote the other."
    span = locate_span(tokens, kl, "Who made it?", context=context, level=4.0)
    assert span.text == name, "the lower-case particle between two capitalized words is part of the name"


def test_a_particle_without_a_name_after_it_is_not_taken():
    tokens = ["Leonardo", " da", " painted", " it", "."]
    span = locate_span(
        tokens, np.array([5.0, 0, 0, 0, 0]), "Who painted it?", context="Leonardo painted it.", level=4.0
    )
    assert span.text == "Leonardo"


def test_no_content_word_gives_no_span():
    assert locate_span(["The", " is", " a", "."], np.zeros(4), "q") is None


def test_span_logprob_is_the_sum_over_its_positions():
    lp = np.array([-0.5, -1.25, -2.0, -0.125], np.float32)
    assert span_logprob(lp, (1, 2)) == pytest.approx(-3.25)
    assert np.isnan(span_logprob(lp, (9,)))


def test_normalize_and_contains_match_like_the_behavior_labels():
    assert normalize("Kvarnström, Édda!") == "kvarnstrom edda"
    assert contains("It is in New York.", "new york") and not contains("Romeo", "rome")
    assert contains("There were twelve.", "12")  # number words as digits, as the behavior matcher


def test_a_number_with_thousands_separators_is_one_word_as_the_matcher_reads_it():
    tokens = ["The", " population", " is", " 8", ",", "200", " people", "."]
    kl = np.array([0.1, 0.1, 0.1, 4.5, 0.2, 0.3, 0.6, 0.1])
    span = locate_span(tokens, kl, "What is the population of Harlowen?", context="It has about 8,200 people.",
                       parametric_answer="About 1,000 people.", level=4.0)  # fmt: skip
    assert span.text == "8,200" and span.word == "8200" and span.head_positions == (3, 4, 5) and span.sensitive
