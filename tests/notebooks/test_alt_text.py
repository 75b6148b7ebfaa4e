"""Every figure also as text and a table (labkit.plots.alt_text): what a screen reader reads
where a sighted student looks, made from the figure's own data.  That each figure the
notebooks draw is followed by it is checked on every quick run (tests/quickrun.py)."""

import html
import re

import pandas as pd
import plotly.graph_objects as go
import pytest

from labkit import plots
from labkit.plots import alt_text


def latency_figure() -> go.Figure:
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[500, 2000], y=[120.0, 2100.0], name="epoll", mode="lines+markers"))
    fig.add_trace(go.Scatter(x=[500, 2000], y=[300.0, None], name="select", mode="lines+markers"))
    fig.add_trace(go.Scatter(x=[2000], y=[50], name="failed", mode="markers",
                             customdata=[["select", 1, 1, "descriptor 1024 is too high"]]))
    fig.update_layout(title="p99 latency<br>vs clients", xaxis_title="clients", yaxis_title="p99 latency (µs)",
                      yaxis_type="log")
    fig.add_annotation(text="not measurable for <b>poll</b>: no counters", x=0, y=0)
    return fig


def bars() -> go.Figure:
    fig = go.Figure(go.Bar(x=["10MB", "1MB"], y=[571.0, 57.2], name="threaded"))
    fig.update_layout(title="upload time", xaxis_title="size", yaxis_title="time (ms)")
    return fig


def ticked() -> go.Figure:
    fig = go.Figure(go.Scatter(x=[102400, 10485760], y=[1.5, 9.25], name="epoll", mode="lines"))
    fig.update_layout(title="goodput", xaxis_title="size", yaxis_title="goodput (Gbit/s)")
    fig.update_xaxes(tickvals=[102400, 10485760], ticktext=["100 KiB", "10 MiB"])
    return fig


DESCRIBED = [
    # (figure, what the description must say, in order)
    (latency_figure, ["p99 latency vs clients.",
                      "p99 latency (µs) (logarithmic) against clients, 2 lines: epoll, select.",
                      "epoll: lowest 120 at 500, highest 2,100 at 2,000 (2 points).",
                      "select: 300 at 500; no value at 2,000.",
                      "Failed points, drawn as crosses: select at 2,000 (descriptor 1024 is too high).",
                      "Notes on the figure: not measurable for poll: no counters."]),
    (bars, ["upload time.", "time (ms) against size, 1 bar: threaded.",
            "threaded: lowest 57.2 at 1MB, highest 571 at 10MB (2 points)."]),
    (ticked, ["goodput (Gbit/s) against size, 1 line: epoll.",
              "epoll: lowest 1.500 at 100 KiB, highest 9.250 at 10 MiB (2 points)."]),
    (lambda: go.Figure(), ["A figure without a title.", "Nothing is drawn."]),
]


@pytest.mark.parametrize("make, says", DESCRIBED, ids=["lines-failed-notes", "bars", "tick-labels", "empty"])
def test_the_description_says_what_the_figure_draws_from_its_own_data(make, says):
    text = alt_text.describe(make())
    at = 0
    for sentence in says:
        found = text.find(sentence, at)
        assert found >= 0, f"{sentence!r} not in (after position {at}):\n{text}"
        at = found + len(sentence)


def test_table_rows_headers_and_missing():
    """The table has a row per value with the axes titles as headers and says what is missing."""
    table = alt_text.data_table(latency_figure())
    assert list(table.columns) == ["series", "clients", "p99 latency (µs)"]
    assert table.values.tolist() == [["epoll", "500", "120"], ["epoll", "2,000", "2,100"], ["select", "500", "300"],
                                     ["select", "2,000", "missing"],
                                     ["failed", "2,000", "failed: descriptor 1024 is too high"]]


def test_disclosure_is_a_captioned_table():
    """The disclosure is a details with a captioned table of column headers."""
    shown = alt_text.as_html(latency_figure())
    assert shown.startswith(f'<details class="{alt_text.CLASS}"><summary>Figure as text and table: p99 latency vs')
    assert "<caption>p99 latency vs clients</caption>" in shown
    assert re.findall(r'<th scope="col">([^<]*)</th>', shown) == ["series", "clients", html.escape("p99 latency (µs)")]
    assert shown.count("<tr>") == 1 + 5


def test_a_long_table_is_cut_and_says_so():
    fig = go.Figure(go.Scatter(x=list(range(500)), y=list(range(500)), name="many"))
    shown = alt_text.as_html(fig)
    assert shown.count("<tr>") == 1 + alt_text.TABLE_ROWS_MOST
    assert f"(the first {alt_text.TABLE_ROWS_MOST} of 500 rows)" in shown


def test_a_lab_chart_with_a_failed_point_is_described_with_its_reason():
    df = pd.DataFrame([
        {"experiment": "echo_scale", "model": "epoll", "clients": 100, "repeat": 0, "status": "ok", "error": "",
         "lat_p99_us": 150.0},
        {"experiment": "echo_scale", "model": "epoll", "clients": 1000, "repeat": 0, "status": "ok", "error": "",
         "lat_p99_us": 900.0},
        {"experiment": "echo_scale", "model": "select", "clients": 100, "repeat": 0, "status": "ok", "error": "",
         "lat_p99_us": 200.0},
        {"experiment": "echo_scale", "model": "select", "clients": 1000, "repeat": 0, "status": "failed",
         "error": "FD_SETSIZE: descriptor 1024 is too high", "lat_p99_us": None},
    ])
    text = alt_text.describe(plots.metric_vs(df, "lat_p99_us"))
    # the x values as the axis writes them (its tick labels)
    assert "epoll: lowest 150 at 100, highest 900 at 1000 (2 points)" in text, text
    assert "whiskers: one run, no interval" in text, text  # the notes under the title
    assert "Failed points, drawn as crosses: select at 1000 (FD_SETSIZE: descriptor 1024 is too high)" in text, text


def test_in_a_kernel_each_figure_shown_is_followed_by_its_text():
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    published = []
    shell.display_pub.publish = lambda data, metadata=None, **kwargs: published.append(data)
    try:
        plots.describe_figures()
        shell.run_cell("import plotly.graph_objects as go\n"
                       "go.Figure(go.Bar(x=['a'], y=[1], name='one')).update_layout(title='t')")
    finally:
        shell.display_formatter.ipython_display_formatter.pop(go.Figure, None)
        InteractiveShell.clear_instance()
    kinds = [sorted(data) for data in published]
    assert any("application/vnd.plotly.v1+json" in kind for kind in kinds), kinds
    last = published[-1]
    assert alt_text.CLASS in last.get("text/html", "") and "one: 1 at a." in last["text/html"]


def chunks_of(png: bytes) -> list[tuple[bytes, bytes]]:
    """A PNG's chunks (type, data), each CRC checked."""
    import struct
    import zlib

    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    found, at = [], 8
    while at < len(png):
        length, kind = struct.unpack(">I4s", png[at:at + 8])
        data = png[at + 8:at + 8 + length]
        assert struct.unpack(">I", png[at + 8 + length:at + 12 + length])[0] == zlib.crc32(kind + data), kind
        found.append((kind, data))
        at += 12 + length
    return found


def one_pixel_png() -> bytes:
    import struct
    import zlib

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\0\0")) + chunk(b"IEND", b""))


def test_an_exported_png_carries_the_title_and_description_as_text_chunks():
    fig = latency_figure()
    chunks = chunks_of(alt_text.in_png(one_pixel_png(), fig))
    assert [kind for kind, _ in chunks] == [b"IHDR", b"iTXt", b"iTXt", b"IDAT", b"IEND"]
    texts = {data.split(b"\0", 1)[0]: data.split(b"\0", 5)[-1].decode() for kind, data in chunks if kind == b"iTXt"}
    assert texts == {b"Title": "p99 latency vs clients", b"Description": alt_text.describe(fig)}


def test_an_exported_svg_is_named_and_described_for_a_screen_reader():
    svg = b'<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><rect/></svg>'
    shown = alt_text.in_svg(svg, latency_figure()).decode()
    assert shown.startswith('<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10" role="img">'
                            "<title>p99 latency vs clients</title><desc>p99 latency vs clients. p99 latency")
    import xml.dom.minidom

    xml.dom.minidom.parseString(shown)  # still well-formed


def one_page_pdf() -> bytes:
    """A one-page PDF drawing a line, as kaleido's have one page and one content stream."""
    import io

    from pypdf import PdfWriter
    from pypdf.generic import DecodedStreamObject, NameObject

    writer = PdfWriter()
    page = writer.add_blank_page(200, 100)
    drawing = DecodedStreamObject()
    drawing.set_data(b"0 0 m 200 100 l S")
    page[NameObject("/Contents")] = writer._add_object(drawing)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def pdf_tags(pdf: bytes) -> dict:
    """What a screen reader's PDF reader looks up, read back with pypdf: the catalog's marks,
    the structure tree's figures and their /Alt, the page's marked content and its title."""
    import io

    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(pdf))
    catalog = reader.trailer["/Root"]
    document = catalog["/StructTreeRoot"]["/K"].get_object()
    figures = [kid.get_object() for kid in document["/K"]]
    page = reader.pages[0]
    parents = catalog["/StructTreeRoot"]["/ParentTree"]["/Nums"]
    return {"marked": bool(catalog["/MarkInfo"]["/Marked"]), "lang": catalog["/Lang"],
            "document": document["/S"], "figures": [(f["/S"], f["/Alt"], f["/K"]) for f in figures],
            "figure_on_page": figures[0]["/Pg"].get_object() == page.get_object(),
            "content": page.get_contents().get_data(), "parent": (parents[0], parents[1][0].get_object() == figures[0]),
            "struct_parents": page["/StructParents"], "title": reader.metadata.title,
            "shows_title": bool(catalog["/ViewerPreferences"]["/DisplayDocTitle"])}


def test_exported_pdf_is_tagged_with_alt_text():
    """An exported pdf is tagged one figure with the description as its alternative text."""
    fig = latency_figure()
    tags = pdf_tags(alt_text.in_pdf(one_page_pdf(), fig))
    assert tags["marked"] and tags["lang"] == "en" and tags["document"] == "/Document"
    assert tags["figures"] == [("/Figure", alt_text.describe(fig), 0)] and tags["figure_on_page"]
    assert tags["content"].startswith(b"/Figure <</MCID 0>> BDC") and tags["content"].rstrip().endswith(b"EMC")
    assert b"0 0 m 200 100 l S" in tags["content"]  # the drawing, inside the marked content
    assert tags["parent"] == (0, True) and tags["struct_parents"] == 0  # MCID 0 of page 0 -> the figure
    assert tags["title"] == "p99 latency vs clients" and tags["shows_title"]
    assert alt_text.in_pdf(b"not a pdf", fig) == b"not a pdf"


def test_an_exported_page_names_its_plot_and_lists_its_data():
    fig = latency_figure()
    page = alt_text.in_html(fig.to_html(include_plotlyjs=False, full_html=True), fig)
    assert '<html lang="en">' in page
    label = re.search(r'class="plotly-graph-div" role="img" aria-label="([^"]*)"', page)
    assert label and html.unescape(label.group(1)) == alt_text.describe(fig)
    assert page.index(alt_text.CLASS) < page.index("</body>")


def test_text_version_has_intervals_and_checks():
    """What a sighted student reads off whiskers and hollow marks (and the hover), the text
    version says too: each point's interval and what it is, and each failed check's reason."""
    rows = [{"model": "epoll", "clients": c, "repeat": r, "status": "ok", "error": "", "lat_p99_us": 100.0 * c + r,
             "verdicts": {"not_steady": "not steady: p50 was 100-110 µs in the run's first half and 150-160 µs in "
                                        "its second (95% intervals)"} if c == 20 and r == 0 else {}}
            for c in (10, 20) for r in range(3)]
    fig = plots.metric_vs(pd.DataFrame(rows), "lat_p99_us")
    text = alt_text.describe(fig)
    assert ("epoll, each point with its interval: 10: 1,001, 1,000 to 1,002 (75% interval of the median of 3 runs); "
            "20: 2,001, 2,000 to 2,002 (75% interval of the median of 3 runs).") in text, text
    assert ("epoll, self-checks failed (hollow marks): at 20, not steady (1 of 3 runs): p50 was 100-110 µs in the "
            "run's first half and 150-160 µs in its second (95% intervals).") in text, text
    assert "hover for" not in text
    table = alt_text.data_table(fig)
    assert list(table.columns) == ["series", "concurrent clients", "latency p99 (µs)", "interval", "self-checks"]
    assert list(table["interval"]) == ["1,000 to 1,002 (75% interval of the median of 3 runs)",
                                       "2,000 to 2,002 (75% interval of the median of 3 runs)"]
    assert table["self-checks"].iloc[0] == "" and table["self-checks"].iloc[1].startswith("not steady (1 of 3 runs)")
    page = alt_text.as_html(fig)
    assert "<th scope=\"col\">interval</th>" in page and "150-160 µs" in page


def test_points_never_run_are_described_as_not_measurable_not_failed():
    rows = [{"model": m, "clients": 10, "repeat": 0, "status": "ok" if m == "epoll" else "failed",
             "error": "" if m == "epoll" else "not measurable until exercise 1.2: poll runs your stub",
             "waiting_for_exercise": "" if m == "epoll" else "1.2", "lat_p99_us": 100.0 if m == "epoll" else None}
            for m in ("epoll", "poll")]
    text = alt_text.describe(plots.metric_vs(pd.DataFrame(rows), "lat_p99_us"))
    assert ("Points never run, not measurable (drawn as hourglasses): poll at 10 (not measurable until exercise 1.2: "
            "poll runs your stub).") in text, text
    assert "Failed points" not in text
