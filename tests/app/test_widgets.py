"""components.widgets: table columns that show their whole header."""

from __future__ import annotations

import pandas as pd

from components import widgets


def test_numeric_columns_with_long_headers_are_not_squeezed_into_small_ones() -> None:
    frame = pd.DataFrame(
        {"AUC": [0.5], "AUC 95% CI low": [0.4], "AUC 95% CI high": [0.6], "train mean (recall)": [1.0]}
    )
    config = widgets.fitted_columns(
        frame, numbers=dict.fromkeys(("AUC", "AUC 95% CI low", "AUC 95% CI high", "train mean (recall)"), "%.3f")
    )
    widths = {name: col.get("width") for name, col in config.items()}
    assert widths["AUC"] == "small"
    # a small column shows ~8 characters: both CI headers (and RADAR's two "train mean …") read the same there
    assert all(widths[n] != "small" for n in ("AUC 95% CI low", "AUC 95% CI high", "train mean (recall)")), widths
