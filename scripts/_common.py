"""Helpers shared by the data-set scripts.

``python scripts/<name>.py`` puts ``scripts/`` first on ``sys.path``, so each script imports these with
``from _common import …``.
"""

from __future__ import annotations

import argparse
import csv
from collections.abc import Iterator
from pathlib import Path


def read_csv(path: Path, columns: list[str] | None = None) -> list[dict[str, str]]:
    """The rows of a UTF-8 CSV file as dicts.

    Args:
        path: the file.
        columns: the exact header the file must have; ``None`` accepts any header.

    Raises:
        ValueError: when ``columns`` is given and the header differs.
    """
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        if columns is not None and reader.fieldnames != columns:
            raise ValueError(f"{path}: expected columns {columns}, got {reader.fieldnames}")
        return list(reader)


def empty_cells(row: dict[str, str], columns: list[str]) -> list[str]:
    """The ``columns`` whose cell in ``row`` is missing, empty or only whitespace."""
    return [k for k in columns if not (row.get(k) or "").strip()]


def filled_rows(
    name: str, rows: list[dict[str, str]], columns: list[str], problems: list[str]
) -> Iterator[tuple[str, dict[str, str]]]:
    """``(where, row)`` for each row with every one of ``columns`` filled (``where`` = ``"<name> row <i>"``,
    1-based); each other row adds ``"<where>: empty <columns>"`` to ``problems`` and is skipped."""
    for i, row in enumerate(rows, start=1):
        where = f"{name} row {i}"
        empty = empty_cells(row, columns)
        if empty:
            problems.append(f"{where}: empty {', '.join(empty)}")
        else:
            yield where, row


def contains(answer: str, text: str) -> bool:
    """The check used throughout: the expected answer occurs in the text, ignoring case."""
    return answer.strip().casefold() in text.casefold()


def short(text: str, n: int) -> str:
    """``text`` on one line, cut to ``n`` characters with an ellipsis."""
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def add_threads_arg(parser: argparse.ArgumentParser) -> None:
    """The ``--threads`` flag every model-running script takes."""
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads (default 1: bit-reproducible, and fastest on a shared machine)",
    )


def set_threads(threads: int) -> None:
    """Apply ``--threads`` (0 keeps torch's default)."""
    if threads:
        import torch

        torch.set_num_threads(threads)


def file_checks_pass(problems: list[str]) -> bool:
    """Print the file problems (or that the checks passed); ``True`` when there are none."""
    if problems:
        print("file problems:")
        for p in problems:
            print(f"  - {p}")
        return False
    print("file checks passed")
    return True
