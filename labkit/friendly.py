"""A LabError as a student should see it in a notebook: what happened, what to do,
the compiler's own words where there are some, and no traceback."""

from __future__ import annotations

import html
import re

from .errors import BuildError, LabError


def _text_html(text: str) -> str:
    """A message as HTML: escaped, its `commands` set as code (messages mark them with backticks)."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def error_html(problem: LabError) -> str:
    parts = ["<div style='border-left:4px solid #B00020;padding:4px 10px;background:#FDECEA'>",
             f"<b>Problem:</b> {_text_html(problem.what)}"]
    if isinstance(problem, BuildError) and problem.output:
        parts.append(f"<pre style='white-space:pre-wrap'>{html.escape(problem.output)}</pre>")
    if problem.fix:
        parts.append(f"<br><b>What to do:</b> {_text_html(problem.fix)}")
    parts.append("</div>")
    return "".join(parts)


def friendly_errors() -> None:
    """In this IPython kernel, show a LabError as error_html, not as a traceback; the
    cell still fails, so papermill still stops there."""
    from IPython import get_ipython
    from IPython.display import HTML, display

    shell = get_ipython()
    if shell is None:
        return

    def show(shell, etype, value, tb, tb_offset=None):
        display(HTML(error_html(value)))

    shell.set_custom_exc((LabError,), show)
