"""Helpers for putting untrusted text (user input, model output, file names, error messages) on a page safely."""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

from core.io import REPO_ROOT, cache_dir

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$&:=\"'^])")


def escape_markdown(text: str) -> str:
    """Backslash-escape every markdown/HTML-significant character so ``st.markdown`` shows ``text`` as is.

    Streamlit never renders raw HTML without ``unsafe_allow_html`` (which this app never uses); escaping
    also stops user text from turning into links, emphasis, LaTeX (``$``), color directives or emoji
    shortcodes (``:name:``). Prefer ``st.text``/``st.code`` for long text; use this for short inline values.
    """
    return _MD_SPECIAL.sub(r"\\\1", text)


def _server_folders() -> list[tuple[str, str]]:
    """(folder, label) pairs of this server's own folders, longest first."""
    candidates = [
        (cache_dir(), "[cache]"),
        (REPO_ROOT, "[app]"),
        (Path(sys.prefix), "[python environment]"),
        (Path(sys.base_prefix), "[python]"),
        (Path(tempfile.gettempdir()), "[temp]"),
        (Path.home(), "~"),
    ]
    folders: dict[str, str] = {}
    for folder, label in candidates:
        for form in {str(folder), str(folder.resolve())}:
            if len(Path(form).parts) > 1:  # never the file-system root itself
                folders.setdefault(form.rstrip("/"), label)
    return sorted(folders.items(), key=lambda item: len(item[0]), reverse=True)


def redact_paths(text: str) -> str:
    """``text`` with this server's own folders (the app, its cache, the Python environment, the temporary
    folder, the home folder) replaced by short labels such as ``[cache]`` or ``~``.

    Error messages from the library may name files on the server; a page shows them without those paths.
    Paths the user typed elsewhere (a model folder of their own) are left as they are.
    """
    for folder, label in _server_folders():
        # a whole folder name only: not followed by more of a name ("/work/main" in "/work/main2")
        text = re.sub(re.escape(folder) + r"(?![\w-]|\.\w)", lambda _m, lbl=label: lbl, text)
    return text


def plain_message(text: str) -> str:
    """A message for ``st.error``/``st.warning``: server paths redacted, then markdown-escaped, so the user
    sees the words as written and nothing in them is rendered as markup."""
    return escape_markdown(redact_paths(text))


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``"1 batch"``, ``"3 batches"``: ``n`` and the noun in the number it needs (``plural`` defaults to
    ``noun + "es"`` after s, x, z, ch and sh, else ``noun + "s"``)."""
    if n == 1:
        return f"{n} {noun}"
    if plural is None:
        plural = noun + ("es" if noun.endswith(("s", "x", "z", "ch", "sh")) else "s")
    return f"{n} {plural}"
