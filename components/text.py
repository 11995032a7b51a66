"""Helpers for putting untrusted text (user input, model output, file names) on a page safely."""

from __future__ import annotations

import re

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$&:=\"'^])")


def escape_markdown(text: str) -> str:
    """Backslash-escape every markdown/HTML-significant character so ``st.markdown`` shows ``text`` as is.

    Streamlit never renders raw HTML without ``unsafe_allow_html`` (which this app never uses); escaping
    also stops user text from turning into links, emphasis, LaTeX (``$``), colour directives or emoji
    shortcodes (``:name:``). Prefer ``st.text``/``st.code`` for long text; use this for short inline values.
    """
    return _MD_SPECIAL.sub(r"\\\1", text)
