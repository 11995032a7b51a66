"""docs/architecture.md lists every module of core/, figures/, components/, pages/ and scripts/, and no module that
is gone.

The document's tables name modules relative to the package they sit under: a heading or a bold first cell
(``## `components/` …``, ``| **`core/model/`** |``) sets the package; a first cell names modules of that package
(``handle.py``) or, with a full path, any module (``core/io.py``); a first cell that names a sub-package
(``crm/``) makes the row's other ``*.py`` names modules of that sub-package. A package named this way counts
its ``__init__.py`` as named (pages/ and scripts/, which have none, are folders, not packages).
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "architecture.md"
TOP = ("core/", "figures/", "components/", "pages/", "scripts/", "read_or_recall/")
_TICKED = re.compile(r"`([^`]+)`")
_BOLD_PACKAGE = re.compile(r"\*\*`([\w/]+/)`\*\*")


def _resolve(name: str, package: str | None) -> str | None:
    """A name from the document as a path from the repository root (``None`` when it names no module)."""
    if not re.fullmatch(r"[\w/.]+", name) or not name.endswith((".py", "/")):
        return None
    if name.startswith(TOP):
        return name
    return package + name if package else None


def named_modules(text: str) -> set[str]:
    """Every module path (``core/model/handle.py``) the document names, by the rules of the module docstring."""
    named: set[str] = set()
    package: str | None = None
    for line in text.splitlines():
        if line.startswith("#"):
            heading = _TICKED.findall(line)
            package = heading[0] if heading and heading[0].startswith(TOP) and heading[0].endswith("/") else None
            if package:
                named.add(package + "__init__.py")
            continue
        if not line.startswith("|"):
            continue
        cells = line.strip().strip("|").split("|")
        bold = _BOLD_PACKAGE.search(cells[0])
        if bold:
            package = bold.group(1)
            named.add(package + "__init__.py")
            continue
        for name in _TICKED.findall(cells[0]):
            path = _resolve(name, package)
            if path is None:
                continue
            if path.endswith("/"):
                named.add(path + "__init__.py")
                for inner in _TICKED.findall("|".join(cells[1:])):
                    if re.fullmatch(r"\w+\.py", inner):
                        named.add(path + inner)
            else:
                named.add(path)
    return named


def modules_on_disk() -> set[str]:
    """Every ``.py`` file under core/, figures/, components/, pages/, scripts/ and read_or_recall/, from the repository
    root."""
    found = set()
    for top in TOP:
        for path in (REPO / top).rglob("*.py"):
            if "__pycache__" not in path.parts:
                found.add(path.relative_to(REPO).as_posix())
    return found


def test_every_module_is_named_in_the_architecture_document():
    missing = sorted(modules_on_disk() - named_modules(DOC.read_text(encoding="utf-8")))
    assert not missing, f"docs/architecture.md does not name: {', '.join(missing)}"


def test_the_architecture_document_names_no_module_that_does_not_exist():
    named = {path for path in named_modules(DOC.read_text(encoding="utf-8")) if not path.endswith("/__init__.py")}
    stale = sorted(named - modules_on_disk())
    assert not stale, f"docs/architecture.md names modules that do not exist: {', '.join(stale)}"


def test_the_parser_resolves_headings_bold_packages_full_paths_and_sub_packages():
    text = "\n".join(
        [
            "## `components/` — pieces",
            "| module | what |",
            "|---|---|",
            "| `page.py` | the prologue |",
            "| `core/io.py` | paths |",
            "| **`core/model/`** | the model |",
            "| `handle.py` / `lens.py` | handle, lens |",
            "| `crm/` | `basis.py` (PC1), `store.py`; not `x` or `a.b` |",
            "## Conventions",
            "| `loose.py` | outside any package |",
        ]
    )
    assert named_modules(text) == {
        "components/__init__.py",
        "components/page.py",
        "core/io.py",
        "core/model/__init__.py",
        "core/model/handle.py",
        "core/model/lens.py",
        "core/model/crm/__init__.py",
        "core/model/crm/basis.py",
        "core/model/crm/store.py",
    }
