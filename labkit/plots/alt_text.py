"""Every figure also as text: what a screen reader reads where a sighted student looks.

A plotly figure is a picture drawn in SVG, and its values come out only on hover, with a
mouse.  So each figure a notebook shows is followed by a disclosure ("Figure as text and
table", a <details> the keyboard reaches and a screen reader announces) holding:
  * a description made from the figure's own data, the same data it draws: its title, its
    axes, for each line or bar set where it is lowest and highest, each point's interval
    (its whisker) and the self-checks it failed (its hollow mark) where the lab's figures
    keep them in the trace's meta (labkit.plots.figures.point_meta), the points that failed
    and why, those never run (not measurable), and the notes drawn on it;
  * the data as a table with headers (series, x, y, and the interval and self-checks where
    the figure has them; a caption naming the figure).

    describe(fig)            -> the description, plain text
    data_table(fig)          -> a DataFrame: series, the x axis's title, the y axis's title
    as_html(fig)             -> the disclosure, HTML
    describe_figures()       -> in this IPython kernel, every plotly figure shown is followed
                                by its disclosure (the notebooks call it in their first cell)
    in_svg(svg, fig), in_png(png, fig), in_pdf(pdf, fig), in_html(page, fig)
                             -> an exported figure carrying the same text (labkit export): SVG
                                <title> and <desc>, PNG Title and Description text chunks, a
                                tagged PDF whose one Figure has it as /Alt, the HTML page's
                                plot with role="img" and an aria-label, and the disclosure
                                after it.

Generated from the figure itself, not from the frame it was drawn from, so any figure gets
it: the lab's charts, the seeds' comparisons, a namespace topology, a flame graph.
"""

from __future__ import annotations

import html
import math
import re
import struct
import zlib

import pandas as pd

from .marks import UNMEASURED
from .style import readable

TABLE_ROWS_MOST = 200  # a longer table is cut, and says so
CLASS = "labkit-figure-text"  # the disclosure's class: tests find it by this


def _plain(text) -> str:
    """Text of a plotly label: tags out (<br> as a space), entities decoded, spaces squeezed."""
    text = re.sub(r"<br\s*/?>", " ", str(text or ""))
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", text)).split())


def _title(layout) -> str:
    title = layout.title.text if layout.title and layout.title.text else ""
    return _plain(title) or "A figure without a title"


def _axis_title(layout, name: str) -> str:
    axis = getattr(layout, name, None)
    return _plain(axis.title.text) if axis is not None and axis.title and axis.title.text else name.replace("axis", "")


def _ticks(layout, name: str) -> dict:
    """An axis's own words for its values, where it has some (tickvals -> ticktext)."""
    axis = getattr(layout, name, None)
    if axis is None or axis.tickvals is None or axis.ticktext is None:
        return {}
    return {value: _plain(text) for value, text in zip(axis.tickvals, axis.ticktext)}


def _shown(value, ticks: dict | None = None) -> str:
    if ticks and value in ticks:
        return ticks[value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return readable(float(value))
    return _plain(value)


def _numbers(values) -> list[float | None]:
    found = []
    for value in values if values is not None else []:
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = None
        found.append(number if number is not None and math.isfinite(number) else None)
    return found


def _axes_of(trace) -> tuple[str, str]:
    xref, yref = getattr(trace, "xaxis", None) or "x", getattr(trace, "yaxis", None) or "y"
    return f"xaxis{xref[1:]}", f"yaxis{yref[1:]}"


def _series(fig) -> list[tuple[str, object, list, list]]:
    """(name, trace, xs, ys) of each trace with x and y values."""
    found = []
    for index, trace in enumerate(fig.data):
        xs, ys = getattr(trace, "x", None), getattr(trace, "y", None)
        if xs is None or ys is None:
            continue
        name = _plain(trace.name) or f"series {index + 1}"
        found.append((name, trace, list(xs), list(ys)))
    return found


def _failed_sentence(trace, xs, x_ticks) -> str:
    """The failed points of a labkit.plots failures trace (customdata: model, failed, total, errors)."""
    data = trace.customdata if trace.customdata is not None else [[""] * 4] * len(xs)
    parts = []
    for x, row in zip(xs, data):
        model, errors = (_plain(row[0]), _plain(row[3])) if len(row) >= 4 else ("", "")
        parts.append(f"{model + ' ' if model else ''}at {_shown(x, x_ticks)}" + (f" ({errors})" if errors else ""))
    return f"Failed points, drawn as crosses: {'; '.join(parts)}."


def _whiskers(trace, ys) -> list[tuple[float, float] | None]:
    """Each point's whisker as (low, high) from the trace's error bars, None where it has none."""
    error = getattr(trace, "error_y", None)
    up = _numbers(error.array) if error is not None and error.array is not None else []
    down = _numbers(error.arrayminus) if error is not None and error.arrayminus is not None else up
    found = []
    for index, y in enumerate(_numbers(ys)):
        high = up[index] if index < len(up) else None
        low = down[index] if index < len(down) else None
        found.append((y - low, y + high) if y is not None and high is not None and low is not None
                     and (high or low) else None)
    return found


def _checked(trace, n: int) -> tuple[list[str], list[str]]:
    """What each point's interval is and the self-checks it failed, in words, from the trace's
    meta (figures.point_meta); empty strings where the figure keeps none."""
    meta = trace.meta if isinstance(getattr(trace, "meta", None), dict) else {}
    kinds = [_plain(kind) for kind in meta.get("interval", [])]
    checks = [_plain(flags) for flags in meta.get("verdicts", [])]
    return (kinds + [""] * n)[:n], (checks + [""] * n)[:n]


def _interval_text(whisker, kind: str) -> str:
    if whisker is None:
        return kind if kind and "no interval" in kind else ""
    return f"{_shown(whisker[0])} to {_shown(whisker[1])}" + (f" ({kind})" if kind else "")


def _points_sentences(name, trace, xs, ys, x_ticks) -> list[str]:
    """Each point's interval, and the self-checks the hollow ones failed, where the trace keeps them."""
    if not isinstance(getattr(trace, "meta", None), dict):
        return []
    kinds, checks = _checked(trace, len(xs))
    whiskers = _whiskers(trace, ys)
    values = _numbers(ys)
    said = [f"{_shown(x, x_ticks)}: {_shown(y)}" + (f", {_interval_text(w, k)}" if _interval_text(w, k) else "")
            for x, y, w, k in zip(xs, values, whiskers, kinds) if y is not None]
    sentences = [f"{name}, each point with its interval: {'; '.join(said)}."] if said else []
    hollow = [f"at {_shown(x, x_ticks)}, {check}" for x, check in zip(xs, checks) if check]
    if hollow:
        sentences.append(f"{name}, self-checks failed (hollow marks): {'; '.join(hollow)}.")
    return sentences


def _unmeasured_sentence(trace, xs, x_ticks) -> str:
    """The points never run of a labkit.plots trace (figures.add_unmeasurable's customdata: model, repeats, why)."""
    data = trace.customdata if trace.customdata is not None else [[""]] * len(xs)
    parts = []
    for x, row in zip(xs, data):
        model, why = _plain(row[0]), _plain(row[-1]) if len(row) > 1 else ""
        parts.append(f"{model + ' ' if model else ''}at {_shown(x, x_ticks)}" + (f" ({why})" if why else ""))
    return f"Points never run, not measurable (drawn as hourglasses): {'; '.join(parts)}."


def describe(fig) -> str:
    """The figure in words, from its own data (see the module's docstring)."""
    layout = fig.layout
    sentences = [f"{_title(layout)}."]
    subtitle = layout.title.subtitle.text if layout.title and layout.title.subtitle else None
    if subtitle:  # the settings every point shares, and the notes (labkit.plots.style.set_title)
        lines = re.split(r"<br\s*/?>", subtitle)
        sentences.append("; ".join(_plain(line) for line in lines if _plain(line)) + ".")
    series = _series(fig)
    if series:
        x_name, y_name = _axes_of(series[0][1])
        x_title, y_title = _axis_title(layout, x_name), _axis_title(layout, y_name)
        scale = " (logarithmic)" if getattr(getattr(layout, y_name, None), "type", None) == "log" else ""
        kinds = {trace.type for _, trace, _, _ in series}
        drawn = "bars" if kinds == {"bar"} else "points" if kinds <= {"scatter"} and all(
            "lines" not in (trace.mode or "") for _, trace, _, _ in series) else "lines"
        plain = [s for s in series if s[0] not in ("failed", UNMEASURED)]
        sentences.append(f"{y_title}{scale} against {x_title}, {len(plain)} {drawn[:-1] if len(plain) == 1 else drawn}"
                         + (f": {', '.join(name for name, *_ in plain[:12])}"
                            + (f" and {len(plain) - 12} more" if len(plain) > 12 else "") if plain else "") + ".")
        for name, trace, xs, ys in series:
            x_ticks = _ticks(layout, _axes_of(trace)[0])
            if name == "failed":
                sentences.append(_failed_sentence(trace, xs, x_ticks))
                continue
            if name == UNMEASURED:
                sentences.append(_unmeasured_sentence(trace, xs, x_ticks))
                continue
            values = _numbers(ys)
            points = [(x, y) for x, y in zip(xs, values) if y is not None]
            gaps = [_shown(x, x_ticks) for x, y in zip(xs, values) if y is None]
            gap = f"; no value at {', '.join(gaps)}" if gaps else ""
            if not points:
                sentences.append(f"{name}: no value drawn.")
                continue
            low, high = min(points, key=lambda p: p[1]), max(points, key=lambda p: p[1])
            if len(points) == 1:
                sentences.append(f"{name}: {_shown(low[1])} at {_shown(low[0], x_ticks)}{gap}.")
            else:
                sentences.append(f"{name}: lowest {_shown(low[1])} at {_shown(low[0], x_ticks)}, highest "
                                 f"{_shown(high[1])} at {_shown(high[0], x_ticks)} ({len(points)} points{gap}).")
            sentences += _points_sentences(name, trace, xs, ys, x_ticks)
    else:
        kinds = sorted({trace.type for trace in fig.data})
        sentences.append(f"{len(fig.data)} part(s) drawn ({', '.join(kinds) or 'none'}); the table below lists "
                         "what they hold." if fig.data else "Nothing is drawn.")
    notes = [_plain(a.text) for a in (layout.annotations or []) if a.text]
    if notes:
        sentences.append("Notes on the figure: " + " / ".join(notes) + ".")
    return " ".join(sentences)


def data_table(fig) -> pd.DataFrame:
    """What the figure draws, a row per value: series, x (the axis's title), y (the axis's
    title), and the hover's words where it has some; where the figure keeps its points'
    intervals and self-checks (figures.point_meta), an "interval" and a "self-checks" column."""
    rows = []
    layout = fig.layout
    columns = None
    checked = any(isinstance(getattr(trace, "meta", None), dict) for _, trace, _, _ in _series(fig))
    for name, trace, xs, ys in _series(fig):
        x_name, y_name = _axes_of(trace)
        if columns is None:
            columns = ["series", _axis_title(layout, x_name), _axis_title(layout, y_name)] + (
                ["interval", "self-checks"] if checked else [])
        x_ticks = _ticks(layout, x_name)
        reasons = [_plain(row[-1]) if len(row) >= 3 else "" for row in trace.customdata] \
            if name in ("failed", UNMEASURED) and trace.customdata is not None else [""] * len(xs)
        kinds, checks = _checked(trace, len(xs))
        for x, y, reason, whisker, kind, check in zip(xs, ys, reasons, _whiskers(trace, ys), kinds, checks):
            value = _numbers([y])[0]
            shown = ("failed" + (f": {reason}" if reason else "") if name == "failed"  # drawn where it fits
                     else UNMEASURED + (f": {reason}" if reason else "") if name == UNMEASURED
                     else "missing" if value is None else readable(value))
            rows.append([name, _shown(x, x_ticks), shown] + (
                [_interval_text(whisker, kind) if value is not None and name not in ("failed", UNMEASURED) else "",
                 check] if checked else []))
    if columns is None:  # no x/y traces: labels and values where the trace has them (a flame graph, a tree)
        columns = ["part", "label", "value"]
        for trace in fig.data:
            labels, values = getattr(trace, "labels", None), getattr(trace, "values", None)
            for index, text in enumerate(labels if labels is not None else []):
                value = _numbers([values[index]])[0] if values is not None and index < len(values) else None
                rows.append([trace.type, _plain(text), "missing" if value is None else readable(value)])
    return pd.DataFrame(rows, columns=columns)


def as_html(fig) -> str:
    """The disclosure that follows a figure: its description, and its data as a table."""
    text = describe(fig)
    table = data_table(fig)
    cut = len(table) > TABLE_ROWS_MOST
    shown = table.head(TABLE_ROWS_MOST)
    head = "".join(f'<th scope="col">{html.escape(str(c))}</th>' for c in shown.columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>"
                   for row in shown.itertuples(index=False))
    caption = html.escape(_title(fig.layout)) + (f" (the first {TABLE_ROWS_MOST} of {len(table)} rows)" if cut else "")
    table_html = (f'<table><caption>{caption}</caption><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
                  if len(table) else "<p>No values to list.</p>")
    return (f'<details class="{CLASS}"><summary>Figure as text and table: {html.escape(_title(fig.layout))}'
            f'</summary><p>{html.escape(text)}</p>{table_html}</details>')


def describe_figures() -> None:
    """In this IPython kernel, show each plotly figure followed by its text and table (as_html)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return
    import plotly.graph_objects as go
    from IPython.display import HTML, display

    def show(fig) -> None:
        display(fig._repr_mimebundle_(), raw=True)
        display(HTML(as_html(fig)))

    shell.display_formatter.ipython_display_formatter.for_type(go.Figure, show)


def in_svg(svg: bytes, fig) -> bytes:
    """`svg` with the figure's title as its <title> and its description as its <desc> (the
    first children of the root element: what a screen reader names and reads)."""
    text = svg.decode("utf-8")
    opening = re.search(r"<svg\b[^>]*>", text)
    if opening is None:
        return svg
    root = opening.group(0)
    if "role=" not in root:
        root = root[:-1] + ' role="img">'
    inserted = (f"<title>{html.escape(_title(fig.layout))}</title>"
                f"<desc>{html.escape(describe(fig))}</desc>")
    return (text[:opening.start()] + root + inserted + text[opening.end():]).encode("utf-8")


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def in_png(png: bytes, fig) -> bytes:
    """`png` with iTXt chunks Title and Description (PNG's own keywords, UTF-8), after IHDR."""
    ihdr_end = 8 + 4 + 4 + 13 + 4  # the signature, then IHDR: length, type, 13 bytes, CRC
    if png[:8] != b"\x89PNG\r\n\x1a\n" or png[12:16] != b"IHDR":
        return png
    # iTXt: keyword, NUL, not compressed (0, 0), no language tag, NUL, no translated keyword, NUL, text
    chunks = b"".join(_chunk(b"iTXt", keyword + b"\0\0\0\0\0" + text.encode("utf-8"))
                      for keyword, text in ((b"Title", _title(fig.layout)), (b"Description", describe(fig))))
    return png[:ihdr_end] + chunks + png[ihdr_end:]


def in_html(page: str, fig) -> str:
    """A page plotly's write_html made: its plot named for a screen reader (role="img", an
    aria-label of the description), and the text and table after it."""
    label = html.escape(describe(fig), quote=True)
    page = re.sub(r'<div id="([^"]+)" class="plotly-graph-div"',
                  lambda m: f'<div id="{m.group(1)}" class="plotly-graph-div" role="img" aria-label="{label}"',
                  page, count=1)
    if "<html>" in page and "<html lang=" not in page:
        page = page.replace("<html>", '<html lang="en">', 1)
    return page.replace("</body>", f"{as_html(fig)}</body>", 1)


def in_pdf(pdf: bytes, fig, language: str = "en") -> bytes:
    """`pdf` (one page, kaleido's) as a tagged PDF whose page is one Figure with the
    description as its alternative text (/Alt), as ISO 32000-1 sections 14.6 to 14.9 have it: the
    page's content marked as /Figure with MCID 0, a structure tree Document > Figure whose
    /K is that MCID, the page's /StructParents pointing back through the tree's ParentTree;
    the catalog marked (/MarkInfo), its language set, and the title shown in the window's bar
    (Info /Title, DisplayDocTitle).  A PDF it cannot read is returned as it was."""
    import io

    from pypdf import PdfReader, PdfWriter
    from pypdf.errors import PdfReadError
    from pypdf.generic import (ArrayObject, BooleanObject, DecodedStreamObject, DictionaryObject, NameObject,
                               NumberObject, TextStringObject)

    try:
        writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf)))
    except (PdfReadError, ValueError):
        return pdf
    if len(writer.pages) != 1:
        return pdf
    page = writer.pages[0]

    def stream(data: bytes):
        made = DecodedStreamObject()
        made.set_data(data)
        return writer._add_object(made)

    contents = page.get("/Contents")
    contents = list(contents.get_object()) if isinstance(contents.get_object(), ArrayObject) else [contents]
    page[NameObject("/Contents")] = ArrayObject([stream(b"/Figure <</MCID 0>> BDC\n"), *contents,
                                                 stream(b"\nEMC\n")])
    page[NameObject("/StructParents")] = NumberObject(0)
    root = writer._add_object(DictionaryObject({NameObject("/Type"): NameObject("/StructTreeRoot")}))
    document = writer._add_object(DictionaryObject({NameObject("/Type"): NameObject("/StructElem"),
                                                    NameObject("/S"): NameObject("/Document"),
                                                    NameObject("/P"): root}))
    figure = writer._add_object(DictionaryObject({
        NameObject("/Type"): NameObject("/StructElem"), NameObject("/S"): NameObject("/Figure"),
        NameObject("/P"): document, NameObject("/Pg"): page.indirect_reference, NameObject("/K"): NumberObject(0),
        NameObject("/Alt"): TextStringObject(describe(fig))}))
    document.get_object()[NameObject("/K")] = ArrayObject([figure])
    root.get_object().update({
        NameObject("/K"): document,
        NameObject("/ParentTree"): writer._add_object(DictionaryObject(
            {NameObject("/Nums"): ArrayObject([NumberObject(0), ArrayObject([figure])])})),
        NameObject("/ParentTreeNextKey"): NumberObject(1)})
    writer._root_object.update({
        NameObject("/StructTreeRoot"): root,
        NameObject("/MarkInfo"): DictionaryObject({NameObject("/Marked"): BooleanObject(True)}),
        NameObject("/Lang"): TextStringObject(language),
        NameObject("/ViewerPreferences"): DictionaryObject({NameObject("/DisplayDocTitle"): BooleanObject(True)})})
    writer.add_metadata({"/Title": _title(fig.layout), "/Subject": describe(fig)})
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()
