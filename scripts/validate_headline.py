"""Build, score, fit and measure the headline verdict on rows of four constructions (core.evaluation.constructions).

Stages (each resumable; outputs under ``out/validation/`` unless told otherwise):

* ``build``  — which facts the model knows without context (16-token greedy answers to the relation's question,
  cached), then the rows of every construction, the grouped split (:func:`assign_splits`) and the leak check;
  writes ``assets/validation/rows.csv``.
* ``score``  — every row with the app's default settings (``DualPathSettings()``, the parametric answer generated,
  as the Dual Path page runs it): ``out/validation/scored.jsonl`` (each row and its ``DualPathResult``).
* ``level``  — κ, chosen on the calibration rows labeled by their text: ``out/validation/level.json``.
* ``swap``   — the swap test of every scored agreeing row at the span κ locates (:mod:`core.engine.swap`):
  ``out/validation/swap.*.jsonl``.
* ``fit``    — the axes calibration on the calibration rows (``assets/thresholds/axes-embedded.json``, with its
  provenance: each choice, the candidates, the rows it was made on, every fitted row's key).
* ``measure`` — the headline, axis 1 alone and the text-only rule against behavior and the swap test, per
  construction and split, plus leave-one-construction-out fits: ``assets/validation/figures.json``.
* ``build-typed`` — the typed construction (:mod:`core.evaluation.typed_rows`), report rows only, checked against
  every calibration row: ``assets/validation/typed.csv``; ``score``, ``swap``, ``measure`` and ``table`` take
  ``--set typed`` (scored rows under ``out/validation-typed/``, the bundled κ, the bundled calibration measured:
  ``assets/validation/typed_figures.json``) and ``--model`` (another model under its own calibration record:
  ``out/validation-typed-MODEL/``, ``typed_figures-MODEL.json``).

    python scripts/validate_headline.py build --facts FACTS.json --nq NQ.jsonl [--questions 300]
    python scripts/validate_headline.py score [--shard 0/2]
    python scripts/validate_headline.py level
    python scripts/validate_headline.py swap [--shard 0/2]
    python scripts/validate_headline.py fit
    python scripts/validate_headline.py measure
    python scripts/validate_headline.py table      # figures.json as the markdown table of docs/validity.md
    python scripts/validate_headline.py build-typed --facts FACTS.json --nq NQ.jsonl
    python scripts/validate_headline.py score --set typed && python scripts/validate_headline.py swap --set typed
    python scripts/validate_headline.py measure --set typed && python scripts/validate_headline.py table --set typed
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from pathlib import Path
from typing import Any

from core.evaluation.constructions import (
    ValidationRow,
    assign_splits,
    fresh_rows,
    prose_rows,
    report_only_fresh,
    split_leaks,
    templated_rows,
)
from core.io import asset_path, atomic_write_text

OUT = Path("out/validation")
ROWS_CSV = asset_path("validation") / "rows.csv"
TYPED_CSV = asset_path("validation") / "typed.csv"
SETS: dict[str, tuple[Path, Path]] = {"validation": (ROWS_CSV, OUT), "typed": (TYPED_CSV, Path("out/validation-typed"))}
"""Each row set's CSV and the folder its scored rows and swap tests go to (``--set``)."""
TYPED_FIGURES = asset_path("validation") / "typed_figures.json"
COLUMNS = list(ValidationRow.__dataclass_fields__)
SEED = 0


def _folder(args: argparse.Namespace) -> Path:
    """Where the set's scored rows go: the set's folder, one per model when ``--model`` names another."""
    folder = SETS[args.set][1]
    return folder if not getattr(args, "model", None) else folder.with_name(f"{folder.name}-{args.model}")


def write_rows(rows: list[ValidationRow], path: Path = ROWS_CSV) -> None:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(r.to_dict() for r in rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, buffer.getvalue())


def read_rows(path: Path = ROWS_CSV) -> list[ValidationRow]:
    with path.open(encoding="utf-8", newline="") as fh:
        return [ValidationRow.from_dict(r) for r in csv.DictReader(fh)]


def known_facts(handle: Any, facts: list[Any]) -> set[int]:
    """Indices of the facts whose no-context answer (16 greedy tokens, the relation's question) names the object."""
    from core.evaluation.behavior import find_spans
    from core.evaluation.conflict import AnswerCache, BuildOptions, generate_answers
    from core.evaluation.conflict_sources import question_for

    options = BuildOptions(max_new_tokens=16, batch_size=16, seed=SEED)
    cache = AnswerCache(OUT / "known_answers.json", handle.info.name, 16)
    answers = generate_answers(handle, [(question_for(f), None) for f in facts], options, cache=cache)
    return {f.index for f, a in zip(facts, answers) if a and find_spans(a, f.objects)}


def build(args: argparse.Namespace) -> int:
    from core.evaluation.conflict_sources import read_facts
    from core.model.loading import load_model

    facts = read_facts(args.facts)
    handle = load_model()
    known = known_facts(handle, facts)
    rows = templated_rows(facts, known, SEED, facts) + fresh_rows(facts, known, SEED, facts)
    prose, left = prose_rows(args.nq, questions=args.questions, seed=SEED)
    rows += prose
    assign_splits(rows, seed=SEED)
    rows = report_only_fresh(rows)
    leaks = split_leaks(rows)
    if leaks:
        sys.stderr.write("\n".join(leaks[:20]) + "\n")
        return 1
    write_rows(rows)
    counts: dict[str, int] = {}
    for r in rows:
        key = f"{r.construction}/{r.relation}/{r.split}"
        counts[key] = counts.get(key, 0) + 1
    print(json.dumps({"facts": len(facts), "known": len(known), "nq_left_out": left, "rows": counts}, indent=2))
    return 0


def build_typed(args: argparse.Namespace) -> int:
    """The typed construction (:mod:`core.evaluation.typed_rows`) beside the validation rows: report rows only,
    checked against every calibration row; writes ``assets/validation/typed.csv``."""
    from core.evaluation.conflict_sources import read_facts
    from core.evaluation.typed_rows import AS_TYPED, LATE, NUMBER, typed_rows

    validation = read_rows()
    questions = {AS_TYPED: args.typed, NUMBER: args.numbers, LATE: args.late}
    rows = typed_rows(validation, read_facts(args.facts), str(args.nq), questions=questions, seed=SEED)
    leaks = split_leaks(validation + rows)
    if leaks:
        sys.stderr.write("\n".join(leaks[:20]) + "\n")
        return 1
    write_rows(rows, TYPED_CSV)
    counts: dict[str, int] = {}
    for r in rows:
        counts[f"{r.variant}/{r.relation}"] = counts.get(f"{r.variant}/{r.relation}", 0) + 1
    print(json.dumps(counts, indent=2, ensure_ascii=False))
    return 0


def _key(row: dict[str, Any]) -> tuple[str, str, str]:
    return row["construction"], row["query"], row["context"]


def _done(path: Path) -> set[tuple[str, str, str]]:
    if not path.is_file():
        return set()
    with path.open(encoding="utf-8") as fh:
        return {_key(json.loads(line)["row"]) for line in fh if line.strip()}


def score(args: argparse.Namespace) -> int:
    import torch

    from core.engine import DualPathSettings, ScoreRequest, score_rows
    from core.model.loading import load_model

    torch.set_num_threads(args.threads)
    rows_csv, folder = SETS[args.set][0], _folder(args)
    rows = [r.to_dict() for r in read_rows(rows_csv) if args.split in ("all", r.split)]
    shard, shards = (int(v) for v in args.shard.split("/"))
    out = folder / f"scored.{args.split}.{shard}.jsonl"
    done = _done(out)
    todo = [r for r in rows[shard::shards] if _key(r) not in done]
    handle = load_model(args.model)
    request = ScoreRequest(settings=DualPathSettings(), free_parametric=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("a", encoding="utf-8") as fh:
        for start in range(0, len(todo), args.chunk):
            part = todo[start : start + args.chunk]
            for r, res in zip(part, score_rows(handle, [(r["query"], r["context"]) for r in part], request)):
                fh.write(json.dumps({"row": r, "result": res.to_dict()}, ensure_ascii=False) + "\n")
            fh.flush()
            print(f"{start + len(part)}/{len(todo)}", file=sys.stderr, flush=True)
    return 0


def load_scored(split: str = "all", folder: Path = OUT) -> list[Any]:
    """Every scored row (all shards) under ``folder`` with its swap test when one was run."""
    from core.engine.result import DualPathResult
    from core.engine.swap import SwapTest
    from core.evaluation.headline_fit import Scored

    swaps: dict[tuple[str, str, str], SwapTest] = {}
    for path in sorted(folder.glob("swap.*.jsonl")):
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                item = json.loads(line)
                swaps[_key(item["row"])] = SwapTest.from_dict(item["swap"])
    out = []
    for path in sorted(folder.glob("scored.*.jsonl")):
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                item = json.loads(line)
                row = ValidationRow.from_dict(item["row"])
                if split in ("all", row.split):
                    out.append(Scored(row, DualPathResult.from_dict(item["result"]), swaps.get(_key(item["row"]))))
    return out


def level(args: argparse.Namespace) -> int:
    """κ chosen on the calibration rows labeled by their text (:func:`choose_level`): the level the swap tests
    locate their span at (``out/validation/level.json``)."""
    from core.evaluation.headline_fit import choose_level

    rows = load_scored("calibration")
    _, record = choose_level(rows, rows[0].result.model)
    (OUT / "level.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(record, indent=2))
    return 0


def swap(args: argparse.Namespace) -> int:
    """The swap test of every scored agreeing row, at the span located with κ (the ``level`` stage's; for the typed
    set, which no choice is made on, the κ of the calibration record that decided the scored rows)."""
    import torch

    from core.engine.axes import observe
    from core.engine.calibration_record import record_of_result
    from core.engine.swap import run_swap_tests
    from core.model.loading import load_model

    torch.set_num_threads(args.threads)
    shard, shards = (int(v) for v in args.shard.split("/"))
    folder = _folder(args)
    out = folder / f"swap.{shard}.jsonl"
    done = _done(out)
    todo = [s for s in load_scored(args.split, folder) if s.row.relation in args.relations.split(",")]
    todo = [s for s in todo[shard::shards] if _key(s.row.to_dict()) not in done]
    if args.level is not None:
        kappa = args.level
    elif args.set == "typed":
        axes = record_of_result(todo[0].result).axes if todo else None
        if axes is None:
            sys.stderr.write("nothing to swap-test, or the scored rows' model is not calibrated (calibrate-model)\n")
            return 1
        kappa = axes.span_level
    else:
        kappa = json.loads((OUT / "level.json").read_text())["chosen"]
    handle = load_model(args.model)
    with out.open("a", encoding="utf-8") as fh:
        for start in range(0, len(todo), args.chunk):
            part = todo[start : start + args.chunk]
            spans = [observe(s.result, kappa).span for s in part]
            for s, test in zip(part, run_swap_tests(handle, [s.result for s in part], spans)):
                fh.write(json.dumps({"row": s.row.to_dict(), "swap": test.to_dict()}, ensure_ascii=False) + "\n")
            fh.flush()
            print(f"{start + len(part)}/{len(todo)}", file=sys.stderr, flush=True)
    return 0


def fit(args: argparse.Namespace) -> int:
    """The embedded model's calibration from the calibration rows; its features and provenance as assets."""
    from core.engine.axes_calibration import AXES_FILE
    from core.evaluation.headline_fit import fit_calibration

    rows = load_scored("calibration")
    cal = fit_calibration(rows, rows[0].result.model, choose_features=not args.no_choice)
    text = json.dumps(cal.to_dict(), indent=2, sort_keys=True) + "\n"
    if args.no_write:
        print(text)
    else:
        atomic_write_text(AXES_FILE, text)
        print(f"wrote {AXES_FILE}")
    print(json.dumps(cal.provenance["choices"], indent=2))
    return 0


def _figures(cal: Any, rows: list[Any]) -> dict[str, Any]:
    from core.evaluation.headline_fit import measure

    return measure(rows, cal) if rows else {}


def measure_all(args: argparse.Namespace) -> int:
    """The headline against behavior and the swap test: per construction on report rows (the bundled calibration),
    leave-one-construction-out (fit on one construction's calibration rows, report on the other's report rows),
    and the calibration rows themselves (in-sample, for reference)."""
    from core.engine.axes_calibration import bundled_axes
    from core.evaluation.constructions import PROSE, TEMPLATED
    from core.evaluation.headline_fit import fit_calibration

    everything = load_scored()
    cal = bundled_axes()
    report = [s for s in everything if s.row.split == "report"]
    calibration = [s for s in everything if s.row.split == "calibration"]
    figures: dict[str, Any] = {"calibration": cal.source, "sets": {}}
    for name in sorted({s.row.construction for s in report}):
        figures["sets"][f"{name} (report rows)"] = _figures(cal, [s for s in report if s.row.construction == name])
    figures["sets"]["all report rows"] = _figures(cal, report)
    figures["sets"]["calibration rows (in-sample)"] = _figures(cal, calibration)
    for fitted, reported in ((TEMPLATED, PROSE), (PROSE, TEMPLATED)):
        train = [s for s in calibration if s.row.construction == fitted]
        loco = fit_calibration(train, cal.model)  # the whole procedure, on one construction
        test = [s for s in report if s.row.construction == reported]
        figures["sets"][f"{reported} (report rows), fitted on {fitted} only"] = _figures(loco, test)
    out = asset_path("validation") / "figures.json"
    atomic_write_text(out, json.dumps(figures, indent=2, sort_keys=True) + "\n")
    for name, fig in figures["sets"].items():
        if not fig:
            continue
        h, t, a = fig["headline"], fig["text_only"], fig["axis1"]
        print(
            f"{name:55s} n={h['n']:4d} headline {h['match_rate']} (read {h['per_behavior']['read']['match_rate']} "
            f"/{h['per_behavior']['read']['n']}, recalled {h['per_behavior']['recalled']['match_rate']}"
            f"/{h['per_behavior']['recalled']['n']}) undecided {h['undecided_rate']} | text {t['match_rate']} "
            f"| axis1 {a['match_rate']} | text-wrong rows: headline {fig['text_wrong']['match_rate']}"
            f"/{fig['text_wrong']['n']} | swap-agreeing {fig['swap_agreeing']['match_rate']}"
            f"/{fig['swap_agreeing']['n']}"
        )
    return 0


def measure_typed(args: argparse.Namespace) -> int:
    """The headline on the typed rows under the calibration record that decided them (the bundled one for the
    embedded model), per variant and all together, with the text-only rule and axis 1 alone beside it:
    ``assets/validation/typed_figures.json`` (``typed_figures-MODEL.json`` for ``--model MODEL``)."""
    from core.engine.calibration_record import record_of_result

    rows = load_scored(folder=_folder(args))
    cal = record_of_result(rows[0].result).axes
    if cal is None:
        sys.stderr.write(f"{rows[0].result.model} is not calibrated: run calibrate-model first\n")
        return 1
    figures: dict[str, Any] = {"calibration": cal.source, "model": cal.model, "rows": TYPED_CSV.name, "sets": {}}
    for name in sorted({s.row.variant for s in rows}):
        figures["sets"][f"typed: {name}"] = _figures(cal, [s for s in rows if s.row.variant == name])
    figures["sets"]["all typed rows"] = _figures(cal, rows)
    out = TYPED_FIGURES if not args.model else TYPED_FIGURES.with_name(f"typed_figures-{args.model}.json")
    atomic_write_text(out, json.dumps(figures, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    print(json.dumps({k: v["headline"]["match_rate"] for k, v in figures["sets"].items() if v}, indent=2))
    return 0


def _pct(entry: dict[str, Any], key: str = "match_rate") -> str:
    value = entry.get(key)
    return "—" if value is None else f"{100 * value:.1f} %"


def _of(entry: dict[str, Any], behavior: str) -> str:
    sub = entry["per_behavior"][behavior]
    return f"{sub['match']}/{sub['n']}" + (f" ({_pct(sub)})" if sub["n"] else "")


def table(args: argparse.Namespace) -> int:
    """``assets/validation/figures.json`` as the markdown table of docs/validity.md."""
    path = TYPED_FIGURES if args.set == "typed" else asset_path("validation") / "figures.json"
    if args.set == "typed" and args.model:
        path = TYPED_FIGURES.with_name(f"typed_figures-{args.model}.json")
    figures = json.loads(path.read_text(encoding="utf-8"))
    head = (
        "| rows | behavior-decided | headline matches | read matched | recalled matched | undecided "
        "| text-only rule | axis 1 alone | headline where the text rule fails | headline vs swap test (agreeing) |"
    )
    print(head)
    print("|" + "---|" * 10)
    for name, fig in figures["sets"].items():
        if not fig:
            continue
        h = fig["headline"]
        tw, sw = fig["text_wrong"], fig["swap_agreeing"]
        print(
            f"| {name} | {h['n']} | **{_pct(h)}** | {_of(h, 'read')} | {_of(h, 'recalled')} | "
            f"{_pct(h, 'undecided_rate')} | {_pct(fig['text_only'])} | {_pct(fig['axis1'])} | "
            f"{tw['match']}/{tw['n']} ({_pct(tw)}) | {sw['match']}/{sw['n']} ({_pct(sw)}) |"
        )
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="stage", required=True)
    b = sub.add_parser("build")
    b.add_argument("--facts", type=Path, required=True)
    b.add_argument("--nq", type=Path, required=True)
    b.add_argument("--questions", type=int, default=300)
    t = sub.add_parser("build-typed")
    t.add_argument("--facts", type=Path, required=True)
    t.add_argument("--nq", type=Path, required=True)
    t.add_argument("--typed", type=int, default=30, help="NQ questions as typed (not numbers)")
    t.add_argument("--numbers", type=int, default=20, help="NQ questions whose answer is a number or a year")
    t.add_argument("--late", type=int, default=20, help="NQ questions over a passage naming the answer late")
    s = sub.add_parser("score")
    s.add_argument("--set", choices=sorted(SETS), default="validation")
    s.add_argument("--model", default=None, help="a model as --help of run documents it (default: the embedded)")
    s.add_argument("--shard", default="0/1")
    s.add_argument("--threads", type=int, default=1)
    s.add_argument("--chunk", type=int, default=8)
    s.add_argument("--split", choices=("calibration", "report", "all"), default="all")
    w = sub.add_parser("swap")
    w.add_argument("--set", choices=sorted(SETS), default="validation")
    w.add_argument("--model", default=None)
    w.add_argument("--shard", default="0/1")
    w.add_argument("--threads", type=int, default=1)
    w.add_argument("--chunk", type=int, default=8)
    w.add_argument("--split", choices=("calibration", "report", "all"), default="all")
    w.add_argument("--relations", default="agreeing")
    w.add_argument("--level", type=float, default=None, help="κ to locate the span at (default: the level stage's)")
    f = sub.add_parser("fit")
    f.add_argument("--no-write", action="store_true")
    f.add_argument("--no-choice", action="store_true", help="keep the default features (no cross-validated choice)")
    m = sub.add_parser("measure")
    m.add_argument("--set", choices=sorted(SETS), default="validation")
    m.add_argument("--model", default=None)
    sub.add_parser("level")
    tb = sub.add_parser("table")
    tb.add_argument("--set", choices=sorted(SETS), default="validation")
    tb.add_argument("--model", default=None)
    args = ap.parse_args()
    stages = {"build": build, "score": score, "level": level, "swap": swap, "fit": fit, "table": table}
    stages["build-typed"] = build_typed
    if args.stage == "measure":
        return (measure_typed if args.set == "typed" else measure_all)(args)
    return stages[args.stage](args)


if __name__ == "__main__":
    raise SystemExit(main())
