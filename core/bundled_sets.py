"""Where the bundled labeled sets live, and which there are — a light module (the standard library and
:mod:`core.io` only), so that the Evaluate page lists them before it imports the evaluation package (PyTorch,
scikit-learn: seconds on a server's first run). :mod:`core.evaluation.data` re-exports every name here."""

from __future__ import annotations

from pathlib import Path

from core.io import asset_path

PROBES_DIR = asset_path("probes")
"""The bundled labeled probe sets (``probes.csv`` first) and the conflict set."""
CONFLICT_FILE = PROBES_DIR / "conflict.csv"
SETS_DIR = asset_path("sets")
"""The validity sets (unscreened, shift sets): one folder per set with ``<name>.csv`` and a README."""


def bundled_sets(folder: Path = PROBES_DIR, *, sets_dir: Path | None = SETS_DIR) -> dict[str, Path]:
    """The labeled CSVs shipped in ``folder`` by file name, ``probes.csv`` first, then those of every
    subfolder of ``sets_dir`` (the validity sets, ``assets/sets/<name>/``; ``None`` to leave them out).

    The conflict set is not one of them; a hand-written ``<name>_source.csv`` is listed only when its built
    ``<name>.csv`` (with the behavioral column) is missing.
    """
    found: dict[str, Path] = {}
    if folder.is_dir():
        files = sorted(folder.glob("*.csv"), key=lambda p: (p.name != "probes.csv", p.name))
        found = {
            p.name: p
            for p in files
            if p.name != CONFLICT_FILE.name
            and not (p.stem.endswith("_source") and (p.parent / f"{p.stem[: -len('_source')]}.csv").is_file())
        }
    if sets_dir is not None and sets_dir.is_dir():
        for sub in sorted(p for p in sets_dir.iterdir() if p.is_dir()):
            found.update({k: v for k, v in bundled_sets(sub, sets_dir=None).items() if k not in found})
    return found
