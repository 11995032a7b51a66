"""The build step that keeps an installed Read or Recall from colliding with other packages (docs/notebook.md,
"Installing it").

In the checkout the engine is the top-level package ``core`` and the charts ``figures`` (the design's folders;
``python -m core``, the pages, the scripts and the tests import them by those names). Installed into a user's
environment, top-level ``core`` and ``figures`` would collide with any other distribution of those names — pip would
overwrite one's files with the other's, and only one could be imported. So a regular install (``pip install .``, a
wheel) nests them in the one public package, the way pip vendors its own dependencies:

* ``core/`` → ``read_or_recall/core/``, ``figures/`` → ``read_or_recall/figures/``, ``assets/`` →
  ``read_or_recall/assets/`` (found there by :data:`core.io.ASSETS`, the folder above ``core``);
* every import of ``core`` / ``figures`` in the built files is rewritten to ``read_or_recall.core`` /
  ``read_or_recall.figures`` (import statements and the few module paths written as strings), so the installed
  distribution owns exactly one top-level name, ``read_or_recall``, and ``python -m read_or_recall.core`` is the CLI.

The app (``components``, ``pages``, ``app.py``) is not installed: the notebook's install holds no app code
(``components`` is in the package list for the editable install only, and dropped from a regular build).

An editable install (``pip install -e .``, what the Makefile does for development) is left as it is: the checkout's
``core``, ``figures`` and ``read_or_recall`` are imported from their folders.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PUBLIC = "read_or_recall"
NESTED = ("core", "figures")
APP = ("components",)  # built for the editable install only: a regular install holds no app code
ASSETS = "assets"
_NAMES = "|".join(NESTED)
_FROM = re.compile(rf"^(\s*)from ({_NAMES})(\.[\w.]+)?(\s+import\b)", re.MULTILINE)
_IMPORT = re.compile(rf"^(\s*)import ({_NAMES})(\.[\w.]+)?[ \t]*(#.*)?$", re.MULTILINE)
_STRING = re.compile(rf"""(?<![\w.])(f?["'])({_NAMES})\.(?=[a-z_])""")


def rewrite(text: str) -> str:
    """``text`` (a Python module) with its imports of ``core`` / ``figures`` moved under ``read_or_recall``:
    ``from core.x import y`` → ``from read_or_recall.core.x import y``; ``import core.x`` → the same import plus
    ``from read_or_recall import core`` (the name ``core`` stays bound, as the statement bound it); a string that
    starts with a module path (``"core.scale.ray_eval:EvaluateHandler"``, ``f"core.cli.commands.{name}"``) →
    ``"read_or_recall.core.…"``."""
    text = _FROM.sub(lambda m: f"{m[1]}from {PUBLIC}.{m[2]}{m[3] or ''}{m[4]}", text)
    text = _IMPORT.sub(
        lambda m: (
            f"{m[1]}import {PUBLIC}.{m[2]}{m[3] or ''}; from {PUBLIC} import {m[2]}" + (f"  {m[4]}" if m[4] else "")
        ),
        text,
    )
    return _STRING.sub(lambda m: f"{m[1]}{PUBLIC}.{m[2]}.", text)


class NestedBuild(build_py):
    """``build_py`` dropping ``components`` and nesting ``core``, ``figures`` and ``assets`` under ``read_or_recall``
    (not when editable)."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        lib = Path(self.build_lib)
        for name in APP:
            shutil.rmtree(lib / name, ignore_errors=True)
        public = lib / PUBLIC
        for name in NESTED:
            target = public / name
            if target.exists():
                shutil.rmtree(target)
            shutil.move(str(lib / name), str(target))
        assets = public / ASSETS
        if assets.exists():
            shutil.rmtree(assets)
        shutil.copytree(Path(ASSETS), assets, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        for path in public.rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            new = rewrite(text)
            if new != text:
                path.write_text(new, encoding="utf-8")


setup(cmdclass={"build_py": NestedBuild})
