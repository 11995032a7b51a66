"""What kind of word answers a question (core.engine.answer_kind), the function words of an answer's language
(core.engine.stopwords), and the span that answers the question (core.engine.span) — pure text, no model."""

from __future__ import annotations

import numpy as np
import pytest

from core.engine.answer_kind import (
    DATE,
    NAME,
    NUMBER,
    PERSON,
    PHRASE,
    PLACE,
    fits,
    is_name,
    near_copy,
    near_form,
    question_kind,
    word_kind,
)
from core.engine.span import answer_words, content_words, context_conflicts, locate_span, unanswered
from core.engine.stopwords import languages_of, stopwords_for
from core.engine.verdict import INCONCLUSIVE, NEITHER


@pytest.mark.parametrize(
    ("query", "kind", "noun"),
    [
        ("Who founded Vantrell Systems?", PERSON, "founder"),
        ("Who wrote Hamlet?", PERSON, "author"),
        ("Who was the first president of the United States?", PERSON, "person"),
        ("How many moons does Mars have?", NUMBER, "number"),
        ("How much does it weigh?", NUMBER, "number"),
        ("When was the Orvane Bridge completed?", DATE, "date"),
        ("In what year did the war end?", DATE, "year"),
        ("Where was Koichi Ishii born?", PLACE, "place"),
        ("What is the capital of France?", PLACE, "place"),
        ("In which city is the archive headquartered?", PLACE, "place"),
        ("Quelle est la capitale de l'Italie ?", PLACE, "place"),
        ("Which company developed Active Server Pages?", NAME, "company"),
        ("Combien de lunes a Mars ?", NUMBER, "number"),
        ("Wer schrieb Faust?", PERSON, "person"),
        ("¿Dónde está el museo?", PLACE, "place"),
        ("What colour is snow?", PHRASE, "answer"),
        ("Who is Ilse Marrow?", PHRASE, "answer"),  # a description, not a name
        ("Complete the sentence: Toulouse is located in the continent of", PHRASE, "answer"),
    ],
)
def test_question_kind(query, kind, noun):
    got = question_kind(query)
    assert (got.kind, got.noun) == (kind, noun)


def test_words_of_a_kind():
    assert fits(NUMBER, "two") and fits(NUMBER, "14") and fits(NUMBER, "8,200") and not fits(NUMBER, "small")
    assert fits(DATE, "1612") and fits(DATE, "1990s") and fits(DATE, "March") and not fits(DATE, "bridge")
    # neither a function word of any language nor a nationality is a name
    assert fits(PERSON, "Vance") and not fits(PERSON, "Le") and not fits(PERSON, "Dutch")
    assert not fits(PERSON, "tragedy") and not fits(PLACE, "Der") and fits(PHRASE, "green")
    # a word capitalized only because it starts a sentence is a name where the sources write it capitalized
    assert not is_name("Sure", sentence_initial=True, references="Who is it? The answer is sure.")
    assert is_name("Paris", sentence_initial=True, references="It is in Paris.")
    # a nationality word is the name a question for a language or a religion asks for
    assert fits(NAME, "Spanish", noun="language") and fits(NAME, "Catholic", noun="religion")
    assert not fits(NAME, "Spanish", noun="company") and not fits(PERSON, "English", noun="author")
    assert (word_kind("1634"), word_kind("3"), word_kind("Lyon"), word_kind("green")) == (DATE, NUMBER, NAME, PHRASE)


def test_near_copies_and_near_forms():
    assert near_copy("Veltra", "Veltria") and near_copy("Rome", "Roma") and near_copy("owned", "owner")
    assert not near_copy("1612", "1634") and not near_copy("Lyon", "Paris") and not near_copy("Le", "La")
    assert near_form("Roma", "The capital of Italy is Rome.") == "Rome"
    assert near_form("1612", "It was built in 1613.") is None  # numbers match exactly or not at all


def test_a_french_answer_s_function_words_are_not_content():
    assert languages_of("La capitale de l'Italie est Roma.")[0] == "fr"
    words = answer_words(["La", " capitale", " de", " l", "'", "Italie", " est", " Roma", "."])
    content = [w.norm for w in content_words(words, "Quelle est la capitale de l'Italie ?")]
    assert content == ["roma"]  # not "est", "la", "de", "l", nor the query's "capitale", "italie"
    # an English answer keeps English words that are function words elsewhere ("war", "die")
    assert "war" not in stopwords_for("The war ended in 1918.")


def _span(tokens, kl, query, context, parametric, level=1.0):
    return locate_span(tokens, np.array(kl), query, context=context, parametric_answer=parametric, level=level)


def test_the_span_is_the_number_that_answers_how_many():
    tokens = ["Mars", " has", " two", " small", " moons", ",", " Phobos", " and", " Deimos", "."]
    kl = [0.1, 0.2, 1.74, 2.98, 0.3, 0.1, 0.5, 0.1, 0.4, 0.1]
    span = _span(tokens, kl, "How many moons does Mars have?", "Mars has two small moons, Phobos and Deimos.", "")
    assert span.text == "two" and span.kind == NUMBER and span.answers and span.of_kind == ("two",)
    assert "name a number" in span.why and "“how many”" in span.why
    assert any(w == "small" for w, _ in span.candidates)  # the other candidates are still shown


def test_a_name_in_neither_source_is_the_span_and_is_called_made_up():
    tokens = ["The", " founder", " is", " El", "io", " Vance", ",", " a", " British", " engineer", " who", " founded",
              " the", " company", " in", " 1987", "."]  # fmt: skip
    kl = [0.1, 0.3, 0.1, 2.0, 0.5, 1.5, 0.1, 0.1, 0.9, 0.4, 0.1, 0.1, 0.1, 0.2, 0.1, 5.0, 0.1]
    context = "Vantrell Systems makes sensors. It opened in 1987. It was founded by the engineer Ilse Marrow."
    span = _span(tokens, kl, "Who founded Vantrell Systems?", context, "It was founded by John Vantrell.")
    assert span.text == "Elio Vance" and span.word == "elio" and not span.sourced and span.answers
    assert span.kind == PERSON and "British" not in span.of_kind  # "1987" is in the context, but no name
    verdict, title, _ = unanswered(span, parametric_generated=True, parametric_unsupported=True, lp_parametric=-9.0)
    assert verdict == NEITHER and title.startswith("Neither: the answer names “Elio Vance”, found in neither")
    assert unanswered(span, parametric_generated=True, parametric_unsupported=False, lp_parametric=-1.0) is None


@pytest.mark.parametrize(
    ("tokens", "query", "context", "span_text"),
    [
        # a one-word answer on a line of its own starts its sentence and is still the company the question asks for
        (["Microsoft", "\n", "\n", "Question", ":", " Which", " company", " developed", " Windows", "?"],
         "Which company developed Internet Explorer 10?", "Intel developed Internet Explorer 10.", "Microsoft"),
        # a sentence that goes on with the question's own words: its first word is the name
        (["Microsoft", " developed", " Internet", " Explorer", " 10", "."],
         "Which company developed Internet Explorer 10?", "Intel developed Internet Explorer 10.", "Microsoft"),
        (["English", " is", " the", " official", " language", " in", " United", " Kingdom", "."],
         "Which language is official in United Kingdom?", "Hindi is official in United Kingdom.", "English"),
        # a language is a nationality word
        (["He", " speaks", " French", "."], "Which language does Pierre de Marca speak?", "", "French"),
    ],
)  # fmt: skip
def test_a_sentence_initial_or_nationality_word_answers_a_which_question(tokens, query, context, span_text):
    span = _span(tokens, [1.0] * len(tokens), query, context, "")
    assert span.answers and span.kind == NAME and span.text == span_text and span_text in span.of_kind


def test_a_label_before_a_colon_is_not_a_name():
    tokens = ["Question", ":", " Which", " company", " made", " it", "?", " Answer", ":", " Apple"]
    span = _span(tokens, [1.0] * len(tokens), "Which company made the iPod?", "", "")
    assert span.of_kind == ("Apple",) and span.text == "Apple"


def test_an_answer_that_names_no_author_does_not_answer():
    tokens = ["Hamlet", " is", " a", " tragedy", " set", " in", " Elizabethan", " England", "."]
    kl = [0.1, 0.1, 0.1, 2.0, 0.3, 0.1, 0.5, 0.6, 0.1]
    span = _span(tokens, kl, "Who wrote Hamlet?", "Hamlet is a tragedy written by William Shakespeare.", "")
    assert not span.answers and span.noun == "author" and span.text == "tragedy"
    verdict, title, reason = unanswered(
        span, parametric_generated=True, parametric_unsupported=True, lp_parametric=None
    )
    assert verdict == INCONCLUSIVE and title == "Inconclusive: the answer names no author" and "“who”" in reason


def test_a_near_form_is_found_in_the_sources():
    tokens = ["La", " capitale", " de", " l", "'", "Italie", " est", " Roma", "."]
    span = _span(tokens, [0.1] * 7 + [3.0, 0.1], "Quelle est la capitale de l'Italie ?",
                 "La capitale de l'Italie est Rome.", "The capital of Italy is Rome.")  # fmt: skip
    assert span.text == "Roma" and span.sourced and span.context_form == "Rome" and span.parametric_form == "Rome"


def test_two_passages_that_disagree():
    context = "The bridge was completed in 1612 by masons.\n\nA chronicle says the bridge was completed in 1634."
    assert context_conflicts(context, "1612") == ("1634",)
    assert context_conflicts("It was built in 1857 and restored in 1923.", "1857") == ()
    assert context_conflicts("The tower was built in 1857. It was restored in 1923.", "1857") == ()


def test_a_word_cut_by_the_token_budget_is_found_as_the_context_word_it_begins():
    tokens = ["The", " capital", " of", " Veltria", " is", " Mar"]
    kl = [0.1, 0.1, 0.1, 0.1, 0.1, 6.0]
    query, context = "What is the capital of Veltria?", "The capital of the Republic of Veltria is Marrowgate."
    cut = locate_span(tokens, np.array(kl), query, context=context, parametric_answer="Nova.", level=4.0, cut=True)
    assert cut.text == "Mar" and cut.sourced and cut.context_form == "Marrowgate"
    whole = locate_span(tokens, np.array(kl), query, context=context, parametric_answer="Nova.", level=4.0)
    assert not whole.sourced and whole.context_form is None  # an answer that ended by itself: "Mar" is its word
