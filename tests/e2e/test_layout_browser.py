"""Layout in a real browser: every page at 1,440 and 1,024 px, screenshotted into ``<artifacts>/layout/`` (the
ignored ``out/e2e/`` by default), fails on a metric value that is cut ("Read from th…"), a chart whose legend,
axis titles, tick labels or colour-bar labels overlap, a legend drawn over a bar or a marker (RADAR's accuracy
bars looked ~82 % under their legend at 100 %), and, at 1,440 px, a table cut at the right edge (the agreement
view's "where the threshold comes from" column was half hidden, "what it measures" not shown at all). At 1,024 px
a wide table may scroll sideways: its label column is pinned.

One short run on the embedded model (8 tokens) is reused by every page: the pages are reached through the
sidebar's navigation, so the session keeps its run (no noise, SMA or evaluation run: their metrics and charts
use the same style rules and figure helpers, checked by the unit tests of components/). It also fails when the
navigation names a page "app".
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import ERRORS, RUN_TIMEOUT_MS, AppPage

pytestmark = [pytest.mark.browser, pytest.mark.slow]

WIDTHS = (1440, 1024)
PAGES = (
    ("Dual Path", "Dual Path"),
    ("Attention", "Attention"),
    ("Layer Trajectories", "Layer trajectories"),
    ("Vocabulary Lens", "Vocabulary lens"),
    ("Ablations", "Ablations"),
    ("Self Critique", "Self-Critique"),
    ("Source Attribution", "Source Attribution"),
    ("RADAR", "RADAR"),
    ("Evaluate", "Evaluate"),
    ("Audit Log", "Audit log"),
    ("Start", "Read or Recall"),
)
"""(the navigation's link text, the page's heading)."""
TICK_GAP_PX = 10
"""Tick labels closer than this along their axis overlap (a label's line is ~12 px at plotly's 12 px font)."""
WHOLE_TABLES_FROM_PX = 1440
"""From this window width on, every table shows all its columns without scrolling sideways."""

PROBLEMS_JS = """
([tickGap, wholeTables]) => {
  const problems = [];
  const shown = el => { const r = el.getBoundingClientRect(); return r.width > 0.5 && r.height > 0.5; };
  const box = el => el.getBoundingClientRect();
  const overlap = (a, b) =>
    a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1;
  const text = el => (el.textContent || '').trim().slice(0, 40);

  document.querySelectorAll('[data-testid="stMetricValue"]').forEach(el => {
    const cut = [el, ...el.querySelectorAll('*')].some(e => e.scrollWidth > e.clientWidth + 1 && e.clientWidth > 0);
    const t = el.innerText.trim();
    if (cut || t.endsWith('…')) problems.push(`cut metric value "${t}"`);
  });

  document.querySelectorAll('.js-plotly-plot').forEach((plot, i) => {
    const name = `chart ${i + 1} ("${text(plot.querySelector('.gtitle') || plot).slice(0, 30)}")`;
    const legends = [...plot.querySelectorAll('g.legend')].filter(shown);
    const titleSel = '[class*="xtitle"], [class*="ytitle"], g.annotation text, .cbtitle text';
    const titles = [...plot.querySelectorAll(titleSel)].filter(shown);
    for (const legend of legends) for (const title of titles) {
      if (!legend.contains(title) && overlap(box(legend), box(title))) {
        problems.push(`${name}: legend over "${text(title)}"`);
      }
    }
    // the legend's box (its background) must not cover a bar or a marker: a bar under it looks shorter
    const marks = [...plot.querySelectorAll('g.barlayer g.point path, g.scatterlayer path.point')].filter(shown);
    for (const legend of legends) {
      const area = box(legend.querySelector('rect.bg') || legend);
      const covered = marks.filter(m => overlap(area, box(m)));
      if (covered.length) {
        const bars = covered.filter(m => m.closest('g.barlayer')).length;
        problems.push(`${name}: legend over ${bars ? `${bars} bar(s)` : `${covered.length} marker(s)`}`);
      }
    }
    // tick labels of one axis: consecutive labels closer than a line overlap
    plot.querySelectorAll('g.xaxislayer-above, g.yaxislayer-above').forEach(layer => {
      const vertical = layer.classList.contains('yaxislayer-above');
      const labels = [...layer.querySelectorAll('g.xtick text, g.ytick text')].filter(shown).filter(t => text(t));
      const centers = labels
        .map(t => { const r = box(t); return vertical ? (r.top + r.bottom) / 2 : (r.left + r.right) / 2; })
        .sort((a, b) => a - b);
      for (let k = 1; k < centers.length; k++) {
        if (centers[k] - centers[k - 1] < tickGap) {
          problems.push(`${name}: ${vertical ? 'y' : 'x'} tick labels overlap`);
          break;
        }
      }
      if (!vertical) {  // horizontal labels must also not run into each other
        const flat = labels.filter(t => !(t.getAttribute('transform') || '').includes('rotate')).map(box)
          .sort((a, b) => a.left - b.left);
        for (let k = 1; k < flat.length; k++) {
          if (overlap(flat[k - 1], flat[k])) { problems.push(`${name}: x tick labels run into each other`); break; }
        }
      }
    });
    // colour bars: the title and the tick labels must not overlap, nor the labels each other
    plot.querySelectorAll('g.colorbar').forEach(bar => {
      const title = [...bar.querySelectorAll('.cbtitle text, [class*="cbtitle"] text')].filter(shown);
      const ticks = [...bar.querySelectorAll('text')].filter(shown).filter(t => !title.includes(t) && text(t));
      for (const t of title) for (const k of ticks) {
        if (overlap(box(t), box(k))) { problems.push(`${name}: colour-bar title over "${text(k)}"`); break; }
      }
      const sorted = ticks.map(box).sort((a, b) => a.top - b.top);
      for (let k = 1; k < sorted.length; k++) {
        if (overlap(sorted[k - 1], sorted[k])) { problems.push(`${name}: colour-bar labels overlap`); break; }
      }
    });
  });

  // tables (the data grid): at a width that has room, every column is whole, none beyond the right edge
  if (wholeTables) document.querySelectorAll('[data-testid="stDataFrame"]').forEach((frame, i) => {
    const scroller = frame.querySelector('.dvn-scroller');
    if (!shown(frame) || !scroller) return;
    const hidden = scroller.scrollWidth - scroller.clientWidth;
    if (hidden > 1) {
      const heads = [...frame.querySelectorAll('th')].map(th => th.textContent.trim()).filter(Boolean);
      problems.push(`table ${i + 1} (${heads.slice(0, 2).join(', ')}, …) is cut at the right edge: ${hidden} px ` +
        `of its columns hidden, from "${heads[heads.length - 1]}" on`);
    }
  });
  return problems;
}
"""


def _go(app: AppPage, link: str, heading: str) -> None:
    """Open a page through the sidebar's navigation (the session, and its run, stay)."""
    app.wait_idle()
    app.page.locator('[data-testid="stSidebarNav"] a').filter(has_text=link).first.click()
    shown = app.page.get_by_role("heading", name=heading).or_(app.page.locator(ERRORS)).first
    shown.wait_for(timeout=RUN_TIMEOUT_MS)
    app.settle(RUN_TIMEOUT_MS)
    app.fail_on_error()


def _check(app: AppPage, width: int, shot: Path) -> list[str]:
    """Screenshot the whole page at ``width`` (Streamlit scrolls inside its main container, so the viewport
    grows to its height), then list what is cut or overlaps."""
    height = app.page.evaluate(
        "() => Math.max(...['[data-testid=\"stMain\"]', '[data-testid=\"stAppViewContainer\"]']"
        ".map(s => document.querySelector(s)).filter(Boolean).map(e => e.scrollHeight), 1000)"
    )
    app.page.set_viewport_size({"width": width, "height": min(int(height) + 40, 7000)})
    app.page.wait_for_timeout(1500)  # plotly lays out again at the new size
    shot.parent.mkdir(parents=True, exist_ok=True)
    app.page.screenshot(path=str(shot), full_page=True)
    found = [f"{shot.stem}: {p}" for p in app.page.evaluate(PROBLEMS_JS, [TICK_GAP_PX, width >= WHOLE_TABLES_FROM_PX])]
    app.page.set_viewport_size({"width": width, "height": 1000})
    return found


def test_no_page_cuts_a_value_or_overlaps_chart_labels(app: AppPage, artifacts: Path) -> None:
    app.dual_path_run(
        "What is the capital of Veltria?", "The capital of the Republic of Veltria is Marrowgate.", max_new_tokens=8
    )

    names = app.page.locator('[data-testid="stSidebarNav"] a').all_inner_texts()
    problems = [f"the navigation names a page {n!r}" for n in names if n.strip() == "app"]
    for width in WIDTHS:
        app.page.set_viewport_size({"width": width, "height": 1000})
        for link, heading in PAGES:
            _go(app, link, heading)
            slug = link.lower().replace(" ", "_")
            problems += _check(app, width, artifacts / "layout" / f"{width}-{slug}.png")
    assert not problems, "\n".join(problems)
