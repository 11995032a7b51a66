"""The README is a front page: short, about the project (no issue numbers), the two commands, and links that resolve.

Every relative link of ``README.md`` and ``docs/*.md`` must name a file that exists, and a link to a section of a
Markdown file must name a heading it has. Anchors follow GitHub's rule for headings: lower case, punctuation
dropped, spaces as hyphens, ``-1``, ``-2`` … for repeats.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"
VALIDITY = DOCS / "validity.md"
MAX_LINES = 150

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", flags=re.M | re.S)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", flags=re.M)
_ISSUE = re.compile(r"\bissues? #?\d+", flags=re.I)


def _prose(text: str) -> str:
    """The Markdown without fenced code blocks and inline code spans (links there are examples, not links)."""
    return _INLINE_CODE.sub("", _FENCE.sub("", text))


def _links(path: Path) -> list[str]:
    """Every link target of ``path`` (inline links and images)."""
    return _LINK.findall(_prose(path.read_text(encoding="utf-8")))


def _is_relative(target: str) -> bool:
    return not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) and not target.startswith("//")


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file (repeats numbered as GitHub numbers them)."""
    seen: dict[str, int] = {}
    anchors: set[str] = set()
    for heading in _HEADING.findall(_FENCE.sub("", path.read_text(encoding="utf-8"))):
        slug = _slug(heading)
        count = seen.get(slug, 0)
        anchors.add(slug if count == 0 else f"{slug}-{count}")
        seen[slug] = count + 1
    return anchors


def _markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def test_the_readme_is_a_front_page_under_150_lines() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) < MAX_LINES, f"README.md has {len(lines)} lines; keep it under {MAX_LINES} (depth goes in docs/)"


@pytest.mark.parametrize("path", [README, VALIDITY], ids=lambda p: p.name)
def test_no_issue_numbers(path: Path) -> None:
    hits = [m.group(0) for m in _ISSUE.finditer(path.read_text(encoding="utf-8"))]
    assert not hits, f"{path.name} speaks of the project, not of how it was built: {hits}"


def test_the_readme_states_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    assert "make run" in text and "make test" in text


def test_the_headline_figures_have_their_places() -> None:
    readme = README.read_text(encoding="utf-8")
    assert "How well the headline verdict matches what the model did" in readme and "text-only rule" in readme
    assert "docs/validity.md#the-headline-verdict" in readme
    validity = VALIDITY.read_text(encoding="utf-8")
    assert "## The headline verdict" in validity and "text-only rule" in validity
    assert "the-headline-verdict" in _anchors(VALIDITY)


@pytest.mark.parametrize("path", _markdown_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_points_to_an_existing_file(path: Path) -> None:
    missing = []
    for target in _links(path):
        if not _is_relative(target) or target.startswith("#"):
            continue
        file = target.split("#", 1)[0].split("?", 1)[0]
        if not (path.parent / file).exists():
            missing.append(target)
    assert not missing, f"{path.relative_to(REPO)} links to files that do not exist: {missing}"


def _anchor_targets(path: Path) -> list[tuple[str, Path, str]]:
    """``(link, file it points to, anchor)`` for every relative link of ``path`` that carries an anchor."""
    out = []
    for target in _links(path):
        if not _is_relative(target) or "#" not in target:
            continue
        file, anchor = target.split("#", 1)
        dest = (path.parent / file) if file else path
        if dest.suffix == ".md" and dest.exists():
            out.append((target, dest, anchor))
    return out


@pytest.mark.parametrize("path", _markdown_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_link_to_a_section_names_a_heading(path: Path) -> None:
    broken = [link for link, dest, anchor in _anchor_targets(path) if anchor not in _anchors(dest)]
    assert not broken, f"{path.relative_to(REPO)} links to sections that do not exist: {broken}"


def test_the_slug_rule() -> None:
    assert _slug("The headline verdict (two axes)") == "the-headline-verdict-two-axes"
    assert _slug("The behavior-labeled conflict set (`assets/behavior/`)") == (
        "the-behavior-labeled-conflict-set-assetsbehavior"
    )
    assert _slug("Held out: real prose the fit never saw (NQ-Swap, the whole half)") == (
        "held-out-real-prose-the-fit-never-saw-nq-swap-the-whole-half"
    )
