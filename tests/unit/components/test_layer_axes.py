"""Layer trajectories: the flagged layers are named as layer indices, never as a bare number that reads as a count
(issue 45: "Flagged layers: 2" beside "Layers outside μ ± 2σ: 1 of 30")."""

from __future__ import annotations

from pathlib import Path

from figures.layer_axes import row_names

ROOT = Path(__file__).resolve().parents[3]


def test_flagged_rows_are_named_as_layers() -> None:
    assert row_names([3]) == "layer 2", "row 3 is decoder layer 2"
    assert row_names([3, 6, 8]) == "layers 2, 5 and 7"
    assert row_names([0, 1]) == "the embeddings and layer 0"
    assert row_names([0]) == "the embeddings"


def test_the_page_names_its_flagged_layers_with_them() -> None:
    source = (ROOT / "pages" / "3_Layer_Trajectories.py").read_text(encoding="utf-8")
    assert "row_names(flagged)" in source and '"Flagged layers: "' not in source
