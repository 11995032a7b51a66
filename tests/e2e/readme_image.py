"""The README's picture of the Dual Path page: what a reader sees first, at a readable size, and the text it shows.

:func:`first_view` takes two clips of the page's main column (the sidebar left out) in a :data:`WIDTH`-pixel
window after a run — from the two answers down to the headline's axes (the verdict, its sentence, the answer-span
line), then the per-token KL chart — and stacks them into one PNG at most :data:`MAX_HEIGHT` tall (scaled down
only if it would be taller).
:func:`depicted` reads, from the same page, the text the picture shows; ``make screenshots`` writes it next to the
image (``docs/screenshot.json``), and ``tests/unit/test_readme_images.py`` compares it with what the current code
says for the same inputs, so a picture from an older version fails a test (CONTRIBUTING.md#readme-images).
"""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path
from typing import Any

WIDTH = 1280
MAX_HEIGHT = 1400
MARGIN = 12
RETRIEVAL_HEADER = "Retrieval path (query + context)"
KL_HEADER = "Where the two paths diverge"


def _box(locator: Any) -> dict[str, float]:
    box = locator.bounding_box()
    if box is None:
        raise AssertionError(f"not on screen: {locator}")
    return box


def _clip(page: Any, top: float, bottom: float) -> bytes:
    """The main column (not the sidebar) between ``top`` and ``bottom``."""
    main = _box(page.locator('[data-testid="stMainBlockContainer"]').first)
    left = max(0.0, main["x"] - MARGIN)
    width = min(float(WIDTH), main["width"] + 2 * MARGIN)
    return page.screenshot(clip={"x": left, "y": max(0.0, top), "width": width, "height": bottom - max(0.0, top)})


def _headline_bottom(page: Any) -> float:
    """The bottom of the headline's two axis metrics (below the answer-span line)."""
    span = _box(page.get_by_text("Answer span:").first)
    metrics = page.locator('[data-testid="stMetric"]')
    below = [b for b in (metrics.nth(i).bounding_box() for i in range(metrics.count())) if b and b["y"] > span["y"]]
    end = below[0] if below else span
    return end["y"] + end["height"] + MARGIN


def first_view(app: Any, path: Path) -> tuple[int, int]:
    """Write the README picture of a Dual Path page after a run to ``path``; returns its (width, height)."""
    from PIL import Image

    page = app.page
    height = page.evaluate(
        "() => Math.max(...['[data-testid=\"stMain\"]', '[data-testid=\"stAppViewContainer\"]']"
        ".map(s => document.querySelector(s)).filter(Boolean).map(e => e.scrollHeight), 1000)"
    )
    page.set_viewport_size({"width": WIDTH, "height": min(int(height) + 40, 9000)})
    page.wait_for_timeout(1500)  # plotly re-lays out at the new size
    top = _box(page.get_by_text(RETRIEVAL_HEADER).first)["y"] - MARGIN
    answers_and_headline = _clip(page, top, _headline_bottom(page))
    kl_top = _box(page.get_by_text(KL_HEADER).first)["y"] - MARGIN
    plots = page.locator(".js-plotly-plot")
    kl_chart = next(b for b in (_box(plots.nth(i)) for i in range(plots.count())) if b["y"] > kl_top)
    kl = _clip(page, kl_top, kl_chart["y"] + kl_chart["height"] + MARGIN)
    parts = [Image.open(io.BytesIO(b)).convert("RGB") for b in (answers_and_headline, kl)]
    width = max(p.width for p in parts)
    out = Image.new("RGB", (width, sum(p.height for p in parts) + 2), "white")
    out.paste(parts[0], (0, 0))
    out.paste(Image.new("RGB", (width, 2), (220, 220, 220)), (0, parts[0].height))
    out.paste(parts[1], (0, parts[0].height + 2))
    if out.height > MAX_HEIGHT:
        out = out.resize((round(width * MAX_HEIGHT / out.height), MAX_HEIGHT), Image.LANCZOS)
    path.parent.mkdir(parents=True, exist_ok=True)
    out.save(path, optimize=True)
    return out.size


def depicted(app: Any, query: str, context: str, max_new_tokens: int) -> dict[str, Any]:
    """The text the picture shows (as the page renders it), with the inputs that made it."""
    page = app.page
    blocks = page.locator('[data-testid="stCode"]')
    title = page.locator('[data-testid="stMarkdownContainer"] h4').first.inner_text().strip()
    span_line = page.locator('[data-testid="stMarkdownContainer"]').filter(has_text="Answer span:").first
    span_line = span_line.inner_text().strip()
    return {
        "query": query,
        "context": context,
        "max_new_tokens": max_new_tokens,
        "answers": {"retrieval": blocks.nth(0).inner_text().strip(), "parametric": blocks.nth(1).inner_text().strip()},
        "title": title,
        "reason": _after(page, title),
        "span_line": span_line,
        "commit": _commit(),
    }


def _after(page: Any, title: str) -> str:
    """The headline's sentence of why: the first paragraph after the verdict's title."""
    texts = page.locator('[data-testid="stMarkdownContainer"]').all_inner_texts()
    seen = False
    for text in texts:
        text = text.strip()
        if seen and text and not text.startswith("Answer span:"):
            return text
        seen = seen or text == title
    return ""


def _commit() -> str:
    """The commit the picture was taken from (for the reader of the JSON; the test does not depend on it)."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return ""
    return out.stdout.strip()


def write_depicted(path: Path, text: dict[str, Any]) -> None:
    path.write_text(json.dumps(text, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
