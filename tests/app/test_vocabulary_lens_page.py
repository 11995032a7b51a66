"""The Vocabulary lens page (issue 14): its tables show the numbers first, with the layer pinned (tiny random model);
it computes nothing itself (issue 22)."""

from __future__ import annotations

import ast

from tests.app.conftest import ROOT


def _imported_modules(page: str) -> set[str]:
    tree = ast.parse((ROOT / "pages" / page).read_text(encoding="utf-8"))
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    return names | {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}


def test_the_page_takes_no_norm_and_no_exponential_of_its_own() -> None:
    assert not {"numpy", "math", "torch"} & _imported_modules("4_Vocabulary_Lens.py"), "its numbers come from core"


def test_the_vocabulary_lens_tables_show_the_numbers_first_with_the_layer_pinned(tiny_app) -> None:
    import json

    from tests.app.conftest import APP, ok, open_script

    at = open_script(APP, 120)
    ok(at.switch_page("pages/1_Dual_Path.py").run())
    at.number_input(key="ror.w.max_new_tokens").set_value(4)
    at.text_area(key="ror.w.query").input("What is the capital of Veltria?")
    at.text_area(key="ror.w.context").input("The capital of Veltria is Marrowgate.")
    ok(at.run())
    ok(at.button(key="ror.run").click().run())
    ok(at.switch_page("pages/4_Vocabulary_Lens.py").run())
    assert len(at.dataframe) == 2, "the back-projection and the logit lens"
    lens = at.dataframe[1]
    assert list(lens.value.columns[:5]) == [
        "layer",
        "top-1 differs",
        "KL (nats)",
        "p(answer) retrieval",
        "p(answer) parametric",
    ], "the numbers come before the long top-k text"
    widths = []
    for table in at.dataframe:
        config = json.loads(table.proto.columns)
        assert config["layer"]["pinned"] is True
        text = [name for name, c in config.items() if c.get("type_config", {}).get("type") == "text"]
        assert len(text) == 2
        widths.append({config[name]["width"] for name in text})
    # the per-position lens table's two top-k columns are "medium": two "large" ones hid the second at 1,440 px
    assert {"medium"} in widths and all(w in ({"large"}, {"medium"}) for w in widths)
