"""The validity sets under ``assets/sets/`` (no model run, except the tiny one for the evaluate command):
every set loads with the evaluation loader, has the counts and balance its README states, obeys its answer
rule, repeats no query of another bundled file, and the built CSV is its source plus the behavioral column.

The checks here are written independently of ``scripts/check_sets.py`` (their own normalization and parsing)."""

from __future__ import annotations

import csv
import json
import re
import string
from pathlib import Path

import pytest

from core.evaluation.data import bundled_sets, label_confirmed, read_labeled_csv

ROOT = Path(__file__).resolve().parents[3]
ASSETS = ROOT / "assets"
STOP_WORDS = (
    "a an the of in on at to for from by with and or is are was were do does did what which who when where why how "
    "many much it its this that as into their his her not most more"
)
SETS = ("unscreened", "shift_unanswerable", "shift_paraphrase", "shift_topic_matched")


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def _norm(text: str) -> str:
    table = str.maketrans(dict.fromkeys(string.punctuation + "“”‘’", " "))
    return " ".join(text.lower().translate(table).split())


def _other_queries() -> set[str]:
    """Every query/prompt of the bundled files that are not validity sets."""
    texts: list[str] = []
    for path in [*(ASSETS / "calibration").glob("*.csv"), *(ASSETS / "probes").glob("*.csv")]:
        texts += [r["query"] for r in _rows(path)]
    texts += [r["prompt"] for p in (ASSETS / "radar").glob("*.csv") for r in _rows(p)]
    texts += [e["query"] for e in json.loads((ASSETS / "examples" / "examples.json").read_text(encoding="utf-8"))]
    crm = json.loads((ASSETS / "crm" / "calibration_prompts.json").read_text(encoding="utf-8"))
    texts += [p["query"] for p in crm["prompts"]]
    return {_norm(t) for t in texts}


def _readme_counts(name: str) -> tuple[int, int, int]:
    text = (ASSETS / "sets" / name / "README.md").read_text(encoding="utf-8")
    match = re.search(r"^Rows: (\d+) \((\d+) memorized, (\d+) grounded\)", text, re.MULTILINE)
    assert match, f"{name}/README.md has no 'Rows: N (M memorized, G grounded)' line"
    return int(match[1]), int(match[2]), int(match[3])


@pytest.mark.parametrize("name", SETS)
def test_set_loads_with_the_stated_counts(name):
    rows = read_labeled_csv(ASSETS / "sets" / name / f"{name}.csv")
    n, n_mem, n_grd = _readme_counts(name)
    labels = [r.label for r in rows]
    assert (len(rows), labels.count("memorized"), labels.count("grounded")) == (n, n_mem, n_grd)
    assert abs(n_mem - n_grd) <= 0.1 * n
    minimum = 200 if name == "unscreened" else 80
    assert n >= minimum


@pytest.mark.parametrize("name", SETS)
def test_built_file_is_the_source_plus_parametric_correct(name):
    source = _rows(ASSETS / "sets" / name / f"{name}_source.csv")
    built = _rows(ASSETS / "sets" / name / f"{name}.csv")
    assert len(built) == len(source)
    for s, b in zip(source, built):
        assert {k: b[k] for k in s} == s
        assert b["parametric_correct"] in {"true", "false"}
        assert set(b) == {*s, "parametric_correct"}


@pytest.mark.parametrize("name", SETS)
def test_answer_rule(name):
    for i, row in enumerate(_rows(ASSETS / "sets" / name / f"{name}.csv"), start=1):
        if name == "shift_unanswerable" and row["label"] == "memorized":
            assert row["answer"].lower() not in row["context"].lower(), f"row {i}: the context gives the answer"
        else:
            assert row["answer"] in row["context"], f"row {i}: the answer is not in the context"


def test_no_query_repeats_another_file_or_set():
    others = _other_queries()
    seen: dict[str, str] = {}
    for name in SETS:
        for i, row in enumerate(_rows(ASSETS / "sets" / name / f"{name}.csv"), start=1):
            key = _norm(row["query"])
            assert key not in others, f"{name} row {i} repeats a bundled query: {row['query']!r}"
            assert key not in seen, f"{name} row {i} repeats {seen[key]}"
            seen[key] = f"{name} row {i}"


def test_topic_matched_pairs_share_a_template():
    rows = _rows(ASSETS / "sets" / "shift_topic_matched" / "shift_topic_matched.csv")
    pairs: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        pairs.setdefault(row["pair"], []).append(row)
    assert len(pairs) >= 40
    for members in pairs.values():
        assert sorted(m["label"] for m in members) == ["grounded", "memorized"]
        mem, grd = sorted(members, key=lambda m: m["label"] != "memorized")
        # the two queries differ only where the entity goes
        prefix, _, suffix = mem["template"].partition("{X}")
        for m in (mem, grd):
            assert m["template"] == mem["template"]
            assert m["query"].startswith(prefix) and m["query"].endswith(suffix)
            assert m["query"][len(prefix) : len(m["query"]) - len(suffix)] == m["entity"]
    styles = [r["name_style"] for r in rows if r["label"] == "grounded"]
    assert styles.count("real-looking") >= len(styles) // 3


def test_paraphrase_queries_share_few_words_with_their_context():
    stop = set(STOP_WORDS.split(" "))
    shares = []
    for row in _rows(ASSETS / "sets" / "shift_paraphrase" / "shift_paraphrase.csv"):
        words = [w for w in _norm(row["query"]).split() if w not in stop]
        context = _norm(row["context"]).split()
        # names (capitalized in the query) must occur in both: leave them out
        names = {_norm(w) for w in re.findall(r"[\w'-]+", row["query"])[1:] if w[:1].isupper()}
        words = [w for w in words if w not in names]
        shares.append(sum(any(c.startswith(w[:5]) for c in context) for w in words) / max(len(words), 1))
    assert max(shares) <= 0.5
    assert sum(shares) / len(shares) <= 0.25


def test_unscreened_confirmed_subset_has_both_labels():
    rows = read_labeled_csv(ASSETS / "sets" / "unscreened" / "unscreened.csv")
    confirmed = [r for r in rows if label_confirmed(r.label, r.extra)]
    assert {r.label for r in confirmed} == {"memorized", "grounded"}
    assert len(confirmed) < len(rows)  # not screened: some labels are not confirmed by the model's behavior


def test_evaluate_page_lists_the_sets():
    listed = bundled_sets()
    assert next(iter(listed)) == "probes.csv"
    for name in SETS:
        assert listed[f"{name}.csv"] == ASSETS / "sets" / name / f"{name}.csv"
        assert f"{name}_source.csv" not in listed


def test_evaluate_names_the_set(tmp_path, capsys, cli_model):
    from core.cli import main

    data = tmp_path / "shift_tiny.csv"
    data.write_text("query,context,label\nA?,a is 1.,memorized\nB?,b is 2.,grounded\nC?,c is 3.,grounded\n")
    out = tmp_path / "r.json"
    assert main(["evaluate", str(data), "--out", str(out), "--max-new-tokens", "4", "--sigmas", ""]) == 0
    assert json.loads(out.read_text())["dataset"] == "shift_tiny"
    assert "set=shift_tiny" in capsys.readouterr().err
