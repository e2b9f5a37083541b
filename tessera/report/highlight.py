"""Syntax highlighting of the report's code (loop programs, traces, generated C) by Pygments, to
HTML spans the page's stylesheet colours; plain escaped text where Pygments is not installed or a
page's highlighting budget is spent (a model with hundreds of kernels stays quick to report)."""
from __future__ import annotations

import html

try:
    from pygments import highlight as _highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import CLexer, PythonLexer
except ImportError:      # the report extra: pip install 'tessera[report]'
    _highlight = None

BUDGET_CHARS = 3_000_000      # characters highlighted per report; the rest is plain text


class Highlighter:
    """highlight(text, language) -> HTML (language "python" or "c"); `plain` counts what was left
    unhighlighted (over the budget or without Pygments)."""

    def __init__(self, budget: int = BUDGET_CHARS):
        self.budget, self.plain = budget, 0
        if _highlight is not None:
            self._lexers = {"python": PythonLexer(stripnl=False), "c": CLexer(stripnl=False)}
            self._fmt = HtmlFormatter(nowrap=True, classprefix="h")

    @property
    def available(self) -> bool:
        return _highlight is not None

    def __call__(self, text: str, language: str) -> str:
        if not text:
            return ""
        if _highlight is None or len(text) > self.budget:
            self.plain += 1
            return html.escape(text)
        self.budget -= len(text)
        return _highlight(text, self._lexers[language], self._fmt)

    def css(self) -> str:
        """The stylesheet of the spans (empty without Pygments)."""
        if _highlight is None:
            return ""
        return HtmlFormatter(classprefix="h", style="default").get_style_defs(".code")


__all__ = ["Highlighter"]
