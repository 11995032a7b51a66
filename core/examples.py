"""Bundled examples for the picker (``assets/examples/examples.json``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from core.io import asset_path

EXAMPLES_PATH = asset_path("examples", "examples.json")
KINDS = {
    "known-fact": "A well-known fact, with a context restating it",
    "invented-fact": "An invented fact that exists only in the context",
    "contradiction": "A context that contradicts a well-known fact",
}


@dataclass(frozen=True)
class Example:
    """One bundled example: what to ask, the context, and what a user should expect to see."""

    id: str
    kind: str
    title: str
    query: str
    context: str
    expect: str

    @property
    def label(self) -> str:
        return f"{self.title} — {KINDS.get(self.kind, self.kind).lower()}"


def load_examples(path: Path = EXAMPLES_PATH) -> list[Example]:
    """Read and validate the bundled examples (raises ``ValueError`` naming the bad entry)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list of examples")
    out = []
    for i, item in enumerate(data):
        missing = [k for k in ("id", "kind", "title", "query", "context", "expect") if not item.get(k)]
        if missing:
            raise ValueError(f"{path}: example {i} lacks {', '.join(missing)}")
        if item["kind"] not in KINDS:
            raise ValueError(f"{path}: example {item['id']!r} has unknown kind {item['kind']!r}")
        out.append(Example(**{k: str(item[k]) for k in ("id", "kind", "title", "query", "context", "expect")}))
    return out
