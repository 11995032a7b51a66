"""components.widgets (issue 14): a wide table keeps its label column pinned and its long text narrow."""

from __future__ import annotations


def test_a_wide_table_keeps_its_label_column_pinned_and_its_long_text_narrow() -> None:
    import pandas as pd

    from components.widgets import fitted_columns

    frame = pd.DataFrame({"layer": ["emb"], "KL (nats)": [0.5], "retrieval top-k": ["␣Paris 0.93  ␣the 0.02"]})
    config = fitted_columns(
        frame, pinned=("layer",), text=("retrieval top-k", "absent"), numbers={"KL (nats)": "%.3f", "gone": "%d"}
    )
    assert set(config) == {"layer", "KL (nats)", "retrieval top-k"}, "columns the frame lacks are skipped"
    assert config["layer"]["pinned"] is True
    assert config["retrieval top-k"]["width"] == "medium"
    assert config["KL (nats)"]["type_config"]["format"] == "%.3f"
