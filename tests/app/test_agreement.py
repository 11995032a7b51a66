"""The agreement view of the Dual Path page (issue 14): every detector's verdict on the last run, at a glance.

On the tiny random Llama (``tiny_app``): a run shows one row per cheap detector of the registry, grouped by the
question each answers (issue 23 part 3: in GROUPS order, each group under its question, with its own summary
line and its own words), a page link per detector family, a button with a time estimate per costly detector,
and a costly detector's verdict joins its group's table when its button is pressed.
"""

from __future__ import annotations

import pandas as pd
import pytest

from components import keys
from core.detectors.agreement import cheap_detectors, short_name
from core.detectors.registry import GROUPS
from core.detectors.wording import GROUP_WORDS, says
from core.engine.verdict import DISPLAY, VERDICTS
from tests.app.conftest import APP, ok, open_script

DUAL_PATH = "pages/1_Dual_Path.py"
TIMEOUT = 180
Q, C = "Where is the tower?", "The tower stands in Quillmere."


def _run(at):
    at.number_input(key=keys.widget_key(keys.MAX_NEW_TOKENS)).set_value(4).run()
    at.text_area(key=keys.widget_key(keys.QUERY)).input(Q)
    at.text_area(key=keys.widget_key(keys.CONTEXT)).input(C)
    return ok(at.button(key=keys.RUN).click().run())


def _agreement_table(at):
    """Every group's table, in page order, as one frame."""
    frames = [f.value for f in at.dataframe if {"verdict", "threshold from"} <= set(f.value.columns)]
    if not frames:
        raise AssertionError("no agreement table on the page")
    return pd.concat(frames, ignore_index=True)


def _group_headings(at) -> list[str]:
    titles = {f"**{words.title}** — {GROUPS[group]}": group for group, words in GROUP_WORDS.items()}
    return [titles[m.value] for m in at.markdown if m.value in titles]


def test_the_dual_path_page_shows_every_cheap_detector_with_its_verdict_and_page(tiny_own_tau) -> None:
    at = open_script(APP, TIMEOUT)
    ok(at.switch_page(DUAL_PATH).run())
    assert not [s for s in at.subheader if s.value == "Every detector on this example"], "nothing before a run"
    _run(at)
    assert [s.value for s in at.subheader].count("Every detector on this example") == 1
    df = _agreement_table(at)
    assert list(df["detector"]) == [short_name(d.name) for d in cheap_detectors()]
    every_word = {says(g, v) for g in GROUPS for v in (*VERDICTS, "recall-type", "reasoning-type")}
    assert set(df["verdict"]) <= every_word, "each row in its group's words"
    read_or_recalled = {DISPLAY["read"], DISPLAY["recalled"]}
    for name in ("RADAR", "perplexity", "zlib", "Min-10%"):
        assert not set(df[df["detector"] == name]["verdict"]) & read_or_recalled, f"{name} is never read/recalled"
    assert df["direction"].str.startswith("higher = ").all(), "every score's direction is stated"
    shown = _group_headings(at)
    assert shown == [g for g in GROUPS if g in shown], "groups in GROUPS order, each under its question"
    assert {"context_reliance", "parametric_knowledge", "context_familiarity", "recall_vs_reasoning"} <= set(shown)
    repcs = df[df["detector"] == "RePCS"].iloc[0]
    (result,) = at.session_state[keys.RESULTS].values()
    assert float(repcs["threshold"]) == pytest.approx(result.threshold, rel=1e-3)
    assert float(repcs["score"]) == pytest.approx(result.repcs_score, rel=1e-3, abs=1e-6)
    assert "None" not in df.to_string(), "no literal None in the table"
    titles = [GROUP_WORDS[g].title for g in shown]
    summaries = [i.value for i in at.info if i.value.startswith(tuple(f"{t}: " for t in titles))]
    assert [line.split(": ")[0] for line in summaries] == titles, "one summary per group, counting its own rows"
    assert not [i.value for i in at.info if i.value.startswith(("They agree", "They conflict"))], "no global count"
    axes = [m.value for m in at.markdown if "Headline axis" in m.value]
    assert [a.removeprefix(":material/flag: ").split(": ")[0] for a in axes] == [
        "Headline axis 1 (context reliance)",
        "Headline axis 2 (parametric support)",
    ], "the headline's two axes beside the groups that feed them, and nowhere else"
    links = [link.proto.page for link in at.get("page_link")]
    assert {"RADAR", "Layer_Trajectories", "Evaluate", "Self_Critique", "Source_Attribution"} <= set(links)
    run_buttons = [b for b in at.button if b.key and b.key.startswith(keys.AGREEMENT_RUN)]
    assert {b.label for b in run_buttons} >= {"Run Self-Critique", "Run SMA"}
    assert any("on this machine" in c.value for c in at.caption), "a time estimate next to each costly button"

    ok(at.button(key=next(b.key for b in run_buttons if b.label == "Run CRM L1")).click().run())
    df = _agreement_table(at)
    assert "CRM L1" in list(df["detector"]), "a costly detector's verdict joins the table"
    caption = next(c.value for c in at.caption if c.value.startswith("Each detector's page"))
    assert caption.count("CRM L1") == 1, "a detector that ran is linked once (issue 26)"
    table = next(d for d in at.dataframe if "threshold from" in d.value.columns)
    assert table.proto.row_height > 64, "rows tall enough that the grid wraps the threshold's source (issue 26)"
    assert not any(b.label == "Run CRM L1" for b in at.button if b.key and b.key.startswith(keys.AGREEMENT_RUN))
