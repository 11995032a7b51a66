"""core.model.artifacts: the one artifact store (bundled path, cache path, reader, freshness check; lookup, memo
and lock once) and ModelInfo.is_embedded, the one way to ask "is this the embedded model?" (issue 22 item 4)."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
from pathlib import Path

import pytest

from core.model import artifacts
from core.model.loading import EMBEDDED_NAME

ROOT = Path(__file__).resolve().parents[3]
USERS = (
    "core/methods/crm/store.py",
    "core/detectors/combined.py",
    "core/methods/radar/store.py",
    "core/detectors/thresholds.py",
    "core/methods/repcs.py",
    "core/audit/calibration.py",
    "core/methods/radar/classifier.py",
    "core/methods/radar/evaluation.py",
    "core/methods/redeep/choice.py",
)
"""The modules that each wrote "find this model's calibrated file" (or built its path) before the store existed."""


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("READ_OR_RECALL_CACHE", str(tmp_path / "cache"))
    artifacts.forget()
    reads: list[Path] = []

    def read(path: Path) -> dict:
        reads.append(path)
        return json.loads(path.read_text(encoding="utf-8"))

    bundled = tmp_path / "assets" / "thing.json"
    kind = artifacts.ArtifactKind(
        name="thing",
        read=read,
        bundled=lambda slug, variant: bundled,
        cache=lambda slug, variant: Path("things") / slug / f"{variant}.json",
        fresh=lambda value, handle, variant: None if value.get("model") == handle.info.name else "another model's",
    )
    yield kind, bundled, reads
    artifacts.forget()


def _write(path: Path, stamp: int = 1_000_000_000, **data) -> None:
    """Write ``data`` as JSON with the modification time ``stamp`` (distinct stamps: distinct versions)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    os.utime(path, (stamp, stamp))


def test_model_info_says_whether_it_is_the_embedded_model(tiny_handle):
    assert not tiny_handle.info.is_embedded and tiny_handle.slug != "embedded"
    embedded = dataclasses.replace(tiny_handle.info, name=EMBEDDED_NAME)
    assert embedded.is_embedded
    assert "is_embedded" not in tiny_handle.info.to_dict(), "the result JSON's model_info keeps its keys"


def test_find_looks_in_the_cache_skips_unfit_and_unreadable_files_and_memoizes(store, tiny_handle, caplog):
    caplog.set_level(logging.INFO, logger=artifacts.__name__)
    kind, bundled, reads = store
    _write(bundled, model=tiny_handle.info.name, v=0)
    assert artifacts.find(kind, tiny_handle, "chat") is None, "a bundled file is the embedded model's only"
    path = artifacts.cache_path(kind, tiny_handle, "chat")
    assert path.parts[-3:] == ("things", tiny_handle.slug, "chat.json")
    _write(path, 1, model="another/model", v=1)
    assert artifacts.find(kind, tiny_handle, "chat") is None and "another model's" in caplog.text
    _write(path, 2, model=tiny_handle.info.name, v=2)
    assert artifacts.find(kind, tiny_handle, "chat")["v"] == 2
    assert artifacts.find(kind, tiny_handle, "chat")["v"] == 2
    assert reads.count(path) == 2, "read once per modification time (the stale version, then this one)"
    _write(path, 3, model=tiny_handle.info.name, v=3)  # rewritten: a new modification time
    assert artifacts.find(kind, tiny_handle, "chat")["v"] == 3
    path.write_text("{not json", encoding="utf-8")
    os.utime(path, (4, 4))
    assert artifacts.find(kind, tiny_handle, "chat") is None and "unreadable" in caplog.text


def test_the_embedded_model_finds_the_bundled_file_first(store, tiny_handle):
    kind, bundled, _ = store
    handle = type("H", (), {})()
    handle.info = dataclasses.replace(tiny_handle.info, name=EMBEDDED_NAME)
    handle.slug = "embedded"
    _write(bundled, model=EMBEDDED_NAME, v="bundled")
    _write(artifacts.cache_path(kind, handle, "chat"), model=EMBEDDED_NAME, v="cache")
    assert artifacts.candidates(kind, handle, "chat")[0] == bundled
    assert artifacts.find(kind, handle, "chat")["v"] == "bundled"
    bundled.unlink()
    assert artifacts.find(kind, handle, "chat")["v"] == "cache"


def test_no_module_asks_is_this_the_embedded_model_its_own_way():
    """The six lookups go through the store (or the calibration record, whose kinds are the store's); none compares
    a name or slug with the embedded one's."""
    pattern = re.compile(r"==\s*EMBEDDED_(NAME|SLUG)|EMBEDDED_(NAME|SLUG)\s*==")
    for name in USERS:
        text = (ROOT / name).read_text(encoding="utf-8")
        assert not pattern.search(text), name
        assert "artifacts" in text or "calibration_record" in text or name == "core/methods/repcs.py", name


def test_a_per_template_kind_places_its_files_and_checks_model_template_and_shape(tiny_handle, tmp_path, monkeypatch):
    """The combined model, the Lookback classifier and the ReDeEP choice are declared this one way."""
    monkeypatch.setenv("READ_OR_RECALL_CACHE", str(tmp_path / "cache"))
    kind = artifacts.per_template("fit", lambda path: path, "fits")
    assert kind.bundled("any-slug", "chat") == ROOT / "assets" / "fits" / "embedded-chat.json"
    cached = artifacts.cache_path(kind, tiny_handle, "chat")
    assert cached == tmp_path / "cache" / "fits" / tiny_handle.slug / "chat.json"

    @dataclasses.dataclass
    class Record:
        model: str
        template: str
        n_layers: int | None = None
        n_heads: int | None = None

    info = tiny_handle.info
    assert artifacts.made_for(Record(info.name, "chat"), tiny_handle, "chat") is None
    assert artifacts.made_for(Record(info.name, "chat", info.n_layers, info.n_heads), tiny_handle, "chat") is None
    assert artifacts.made_for(Record("other", "chat"), tiny_handle, "chat") == "made for 'other' / 'chat'"
    assert artifacts.made_for(Record(info.name, "plain"), tiny_handle, "chat") == f"made for {info.name!r} / 'plain'"
    wrong = Record(info.name, "chat", info.n_layers + 1, info.n_heads)
    shape = f"made for {info.n_layers + 1} layers × {info.n_heads} heads"
    assert artifacts.made_for(wrong, tiny_handle, "chat") == shape


def test_a_content_keyed_kind_needs_no_handle_and_checks_the_digest(tmp_path, monkeypatch):
    """RADAR's ensemble and report are keyed by the features they were made from: bundled first, then the cache."""
    monkeypatch.setenv("READ_OR_RECALL_CACHE", str(tmp_path / "cache"))
    bundled = tmp_path / "bundled.json"
    kind = artifacts.ArtifactKind(
        name="by-content",
        read=lambda path: json.loads(path.read_text(encoding="utf-8")),
        bundled=lambda slug, digest: bundled,
        cache=lambda slug, digest: Path("made") / f"{digest}.json",
        fresh=lambda data, handle, digest: None if data["digest"] == digest else "other content",
    )
    assert artifacts.find_by_content(kind, "abc") is None
    cached = artifacts.content_cache_path(kind, "abc")
    assert cached == tmp_path / "cache" / "made" / "abc.json"
    cached.parent.mkdir(parents=True)
    cached.write_text(json.dumps({"digest": "abc", "v": "cache"}), encoding="utf-8")
    bundled.write_text(json.dumps({"digest": "zzz", "v": "bundled"}), encoding="utf-8")
    assert artifacts.find_by_content(kind, "abc")["v"] == "cache", "the bundled file is of other content"
    bundled.write_text(json.dumps({"digest": "abc", "v": "bundled"}), encoding="utf-8")
    artifacts.forget()  # the rewritten file may keep its modification time within the clock's resolution
    assert artifacts.find_by_content(kind, "abc")["v"] == "bundled"
