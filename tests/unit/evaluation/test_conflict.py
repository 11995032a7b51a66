"""The behavior-labeled conflict set's builder (:mod:`core.evaluation.conflict`) and its sources
(:mod:`core.evaluation.conflict_sources`): fact lists, NQ-Swap passages, contexts, splits, and a build with the
tiny random model."""

from __future__ import annotations

import csv
import json

import pytest

import core.evaluation.conflict as conflict
from core.evaluation.behavior import (
    KIND_COUNTERFACTUAL,
    KIND_NQ_SWAP,
    KIND_ON_TOPIC,
    behavior_label,
    find_spans,
    split_aliases,
)
from core.evaluation.conflict import (
    CALIBRATION,
    COLUMNS,
    REPORT,
    AnswerCache,
    BuildOptions,
    build_conflict_set,
    sample_facts,
    split_of,
    write_set,
)
from core.evaluation.conflict_sources import (
    counterfactual_context,
    counterfactual_objects,
    detokenize,
    on_topic_context,
    parse_facts,
    question_for,
    read_nq_swap,
    trim_passage,
)
from core.evaluation.data import read_labeled_csv

pytestmark = pytest.mark.usefixtures("one_thread")

FACTS = [
    {"subject": "Beats Music", "attribute": "Apple", "template": "{} is owned by", "relation_id": "P127"},
    {"subject": "Instagram", "attribute": "Meta", "template": "{} is owned by", "relation_id": "P127"},
    {"subject": "Skype", "attribute": "Microsoft", "template": "{} is owned by", "relation_id": "P127"},
    {"subject": "Italy", "attribute": "Rome", "template": "The capital of {} is", "relation_id": "P36"},
    {"subject": "Kenya", "attribute": "Nairobi", "template": "The capital of {} is", "relation_id": "P36"},
    {"subject": "Zorb", "attribute": "Qux", "template": "{} relates to", "relation_id": "P999", "aliases": ["Q"]},
]


def test_parse_facts_and_questions():
    facts = parse_facts(FACTS)
    assert [f.subject for f in facts][:2] == ["Beats Music", "Instagram"]
    assert question_for(facts[0]) == "Who owns Beats Music?"
    assert question_for(facts[3]) == "What is the capital of Italy?"
    assert question_for(facts[5]) == "Complete the sentence: Zorb relates to …"  # an unknown relation: the cloze
    assert facts[5].objects == ["Qux", "Q"]
    assert counterfactual_context(facts[0], "Microsoft") == "Beats Music is owned by Microsoft."
    topic = on_topic_context(facts[0])
    assert "Beats Music" in topic and not find_spans(topic, ["Apple"])


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"subject": "x"}, "expected a JSON list"),
        ([], "the list is empty"),
        (["text"], "fact 0: expected an object"),
        ([{"subject": "S", "attribute": "A", "template": "no slot", "relation_id": "P1"}], "exactly one {}"),
        ([{"subject": "S", "attribute": " ", "template": "{} is", "relation_id": "P1"}], "fact 0: field 'attribute'"),
        ([FACTS[0], {"subject": "S", "template": "{} is", "relation_id": "P1"}], "fact 1: field 'attribute'"),
        ([{**FACTS[0], "aliases": "Apple Inc"}], "'aliases' must be a list"),
        ([{**FACTS[0], "attribute": "!!"}], "no letters or digits"),
    ],
)
def test_parse_facts_refuses_bad_records_by_position_and_field(data, message):
    with pytest.raises(ValueError, match=message.replace("{", r"\{").replace("}", r"\}")):
        parse_facts(data)


def test_counterfactual_objects_stay_in_the_relation_and_never_overlap_the_truth():
    facts = parse_facts(
        [
            *FACTS,
            {"subject": "Yorkshire", "attribute": "New York", "template": "{} is in", "relation_id": "P1"},
            {"subject": "Lancs", "attribute": "York", "template": "{} is in", "relation_id": "P1"},
            {"subject": "Kent", "attribute": "Leeds", "template": "{} is in", "relation_id": "P1"},
        ]
    )
    others = counterfactual_objects(facts, seed=3)
    assert others == counterfactual_objects(facts, seed=3)  # seeded
    assert others[0] in {"Meta", "Microsoft"} and others[3] == "Nairobi" and others[4] == "Rome"
    assert others[5] is None  # the only object of its relation
    assert others[6] == "Leeds" and others[7] == "Leeds"  # "York" and "New York" overlap
    # a sample draws from the whole list when given as the pool
    sample = [facts[0]]
    assert counterfactual_objects(sample, seed=3)[0] is None
    assert counterfactual_objects(sample, seed=3, pool=facts)[0] in {"Meta", "Microsoft"}


def test_detokenize_and_trim_a_natural_questions_passage():
    raw = "<P> The season , produced by `` NBC '' ( a network ) , had 775 episodes . It 's long . </P>"
    assert detokenize(raw) == 'The season, produced by "NBC" (a network), had 775 episodes. It\'s long.'
    text = "First sentence here. The season had 775 episodes. Third one is here. " + "Filler words. " * 40
    assert trim_passage(text, ["775"], max_words=9) == "First sentence here. The season had 775 episodes."
    assert trim_passage(text, ["999"]) is None


def test_read_nq_swap_keeps_short_answers_and_counts_the_rest(tmp_path):
    def rec(q, sub, org, ctx):
        return json.dumps({"question": q, "sub_context": ctx, "org_answer": org, "sub_answer": sub, "org_context": ""})

    lines = [
        rec("how many episodes in season 4", ["775"], ["23"], "<P> The season had 775 episodes . </P>"),
        rec("who wrote it", ["a b c d e f g"], ["x"], "<P> a b c d e f g wrote it . </P>"),
        rec("where is it", ["Paris"], ["Lyon"], "<P> It is in Lyon . </P>"),
        rec("what is it", ["New York"], ["York"], "<P> It is New York . </P>"),
    ]
    path = tmp_path / "nq.jsonl"
    path.write_text("\n".join(lines) + "\n")
    rows, left = read_nq_swap(path, limit=10, seed=0)
    assert len(rows) == 1
    row = rows[0]
    assert row.kind == KIND_NQ_SWAP and row.query == "How many episodes in season 4?"
    assert row.context == "The season had 775 episodes." and row.answer_context == ["775"]
    assert left == {
        "nq: answer longer than 5 words": 1,
        "nq: passage could not be trimmed around the substituted answer": 1,
        "nq: substituted and original answers overlap": 1,
    }
    path.write_text("not json\n")
    with pytest.raises(ValueError, match="line 1: not JSON"):
        read_nq_swap(path, limit=1, seed=0)


def test_splits_are_seeded_and_disjoint_by_group():
    groups = [f"subject:{i}" for i in range(400)]
    splits = [split_of(g, 0, 0.5) for g in groups]
    assert splits == [split_of(g.upper(), 0, 0.5) for g in groups]  # case-insensitive, deterministic
    share = splits.count(CALIBRATION) / len(splits)
    assert 0.4 < share < 0.6 and set(splits) == {CALIBRATION, REPORT}
    assert sample_facts(list(range(10)), 3, 1) == sample_facts(list(range(10)), 3, 1)
    assert len(sample_facts(list(range(10)), 3, 1)) == 3


def test_build_with_scripted_answers_labels_every_kind(tiny_handle, monkeypatch):
    """The model's answers replaced by a script: which facts are known and how each row is labeled."""

    def scripted(handle, items, options, *, stage="", cache=None, progress=None):
        out = []
        for query, context in items:
            if context is None:  # no-context: the model knows Beats Music, Italy and Kenya
                out.append(
                    {"Who owns Beats Music?": "Apple", "What is the capital of Italy?": "Rome."}.get(
                        query, "Nairobi" if "Kenya" in query else "no idea"
                    )
                )
            elif "note is about" in context:  # on-topic contexts: recalls Beats Music, not Italy
                out.append("Apple Inc." if "Beats" in query else "It is unclear.")
            else:  # counterfactual: follows the context, except for Kenya (both)
                out.append(context.split(" is ")[-1] + (" or Nairobi" if "Kenya" in query else ""))
        return out

    monkeypatch.setattr(conflict, "generate_answers", scripted)
    built = build_conflict_set(tiny_handle, parse_facts(FACTS), BuildOptions(seed=1))
    c = built.counts
    assert (c["facts"], c["facts_known"]) == (6, 3)
    assert c["left_out"]["facts"] == {"not known without context": 3}
    assert c["kept"] == {KIND_COUNTERFACTUAL: {"read": 2}, KIND_ON_TOPIC: {"recalled": 1}}
    assert c["left_out"]["rows"] == {
        KIND_COUNTERFACTUAL: {"answer names both": 1},
        KIND_ON_TOPIC: {"answer names neither": 2},
    }
    rows = {(r["kind"], r["query"]): r for r in built.rows}
    cf = rows[(KIND_COUNTERFACTUAL, "Who owns Beats Music?")]
    assert cf["label"] == "grounded" and cf["behavior"] == "read" and cf["answer_memory"] == "Apple"
    assert cf["no_context_answer"] == "Apple" and cf["group"] == "subject:Beats Music"
    topic = rows[(KIND_ON_TOPIC, "Who owns Beats Music?")]
    assert topic["label"] == "memorized" and topic["answer_context"] == "" and topic["split"] == cf["split"]


def test_build_with_the_tiny_model_writes_a_consistent_set(tiny_handle, tmp_path):
    """The real pipeline end to end with the tiny random model: whatever it answers, every kept row's label is
    the labeler's verdict on its own stored answer, the counts add up, and the CSV is a labeled CSV."""
    facts = parse_facts(FACTS[:3])
    cache = AnswerCache(tmp_path / "cache.json", tiny_handle.info.name, 4)
    known = [f"{f.subject}" for f in facts]
    built = build_conflict_set(tiny_handle, facts, BuildOptions(max_new_tokens=4, batch_size=2), cache=cache)
    # every answer was cached: the three no-context ones and those with a context
    assert len(cache.answers) == 3 + built.counts["rows_answered"] and (tmp_path / "cache.json").is_file()
    assert (
        built.counts["facts"] == 3
        and built.counts["facts_known"] + sum(built.counts["left_out"]["facts"].values()) >= 3
    )
    kept = sum(sum(c.values()) for c in built.counts["kept"].values())
    dropped = sum(sum(c.values()) for c in built.counts["left_out"]["rows"].values())
    assert kept == len(built.rows) and kept + dropped == built.counts["rows_answered"]
    for r in built.rows:
        assert behavior_label(r["build_answer"], r["answer_context"], r["answer_memory"])[0] == r["behavior"]
        assert r["group"].split(":", 1)[1] in known
    # extra rows only (no facts): an invented fact the random model will rarely repeat is still accounted for
    from core.evaluation.conflict_sources import SourceRow

    extra = [
        SourceRow(
            "invented", "test", "q:1", "What is the capital of Ostmerra?", "Its capital is Veyrun.", ["Veyrun"], []
        )
    ]
    built = build_conflict_set(tiny_handle, [], BuildOptions(max_new_tokens=4), extra_rows=extra)
    assert built.counts["rows_answered"] == 1 and "facts" not in built.counts
    path = write_set(tmp_path / "set", built, name="tiny", sources=["test"], attribution="Made up.")
    with path.open(encoding="utf-8") as fh:
        assert next(csv.reader(fh)) == list(COLUMNS)
    readme = (tmp_path / "set" / "README.md").read_text(encoding="utf-8")
    assert "rows answered with their context: 1" in readme and "Made up." in readme
    assert json.loads((tmp_path / "set" / "counts.json").read_text())["counts"]["rows_answered"] == 1
    if built.rows:
        assert read_labeled_csv(path)[0].extra["kind"] == "invented"


def test_build_refuses_bad_options_and_nothing_to_build(tiny_handle):
    with pytest.raises(ValueError, match="max_new_tokens"):
        build_conflict_set(tiny_handle, parse_facts(FACTS), BuildOptions(max_new_tokens=0))
    with pytest.raises(ValueError, match="calibration_fraction"):
        BuildOptions(calibration_fraction=1.0).validate()
    with pytest.raises(ValueError, match="nothing to build"):
        build_conflict_set(tiny_handle, [], BuildOptions())


def test_the_bundled_behavior_set_is_consistent():
    """``assets/behavior/``: a labeled CSV whose every label is the labeler's verdict on its stored answer, whose
    splits never share a subject or question, whose counts match ``counts.json``, with the attribution."""
    from core.io import asset_path

    folder = asset_path("behavior")
    rows = read_labeled_csv(folder / "behavior.csv")
    counts = json.loads((folder / "counts.json").read_text(encoding="utf-8"))["counts"]
    assert len(rows) == counts["total"]["read"] + counts["total"]["recalled"]
    splits: dict[str, set[str]] = {}
    for r in rows:
        e = r.extra
        assert behavior_label(e["build_answer"], e["answer_context"], e["answer_memory"])[0] == e["behavior"]
        assert r.label == ("memorized" if e["behavior"] == "recalled" else "grounded")
        splits.setdefault(e["group"], set()).add(e["split"])
        if e["kind"] in (KIND_COUNTERFACTUAL, KIND_ON_TOPIC):
            assert find_spans(e["no_context_answer"], split_aliases(e["answer_memory"]))  # known without context
    assert all(len(s) == 1 for s in splits.values())
    assert {r.extra["split"] for r in rows} == {CALIBRATION, REPORT}
    readme = (folder / "README.md").read_text(encoding="utf-8")
    for needle in ("Copyright (c) 2022 Kevin Meng", "MIT", "CC BY-SA 3.0", "ml-knowledge-conflicts"):
        assert needle in readme
