"""What a student reads in a notebook besides the plots: a LabError as what happened,
what to do, the compiler's own words where there are some, and no traceback; and a
Note, a sentence that wraps at words at any width of the page."""

from __future__ import annotations

import html
import re

from .errors import BuildError, LabError


def _text_html(text: str) -> str:
    """A message as HTML: escaped, its `commands` set as code (messages mark them with backticks)."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


class Note(str):
    """A line of text for a notebook to show (`plots.counters_note(df)`): the string
    itself, displayed as a paragraph that wraps between words.  print() would put it
    in JupyterLab's <pre>, which breaks a line wider than the page mid-word
    ("summed ov / er")."""

    def _repr_html_(self) -> str:
        return f"<p style='margin:2px 0;max-width:100ch'>{_text_html(self)}</p>"

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(str(self))


def say(*parts, sep: str = " ") -> None:
    """print() for a sentence: show `parts` as a Note, which wraps between words."""
    from IPython.display import display

    display(Note(sep.join(str(part) for part in parts)))


def error_html(problem: LabError) -> str:
    # role=alert: most browser and screen-reader pairs say the problem as it appears, wherever
    # focus is (WAI-ARIA's alert role); not all do for an alert inserted with its text (MDN
    # advises a container already in the page, which a notebook's output cannot keep)
    parts = ["<div role='alert' style='border-left:4px solid #B00020;padding:4px 10px;background:#FDECEA'>",
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
