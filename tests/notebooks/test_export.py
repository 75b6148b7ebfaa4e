"""labkit export: figures as PNG/SVG/PDF/HTML, tables as CSV/Markdown/LaTeX, an index,
and executed notebooks that nbconvert can show with their plots.

The input is a tiny synthetic notebook (two plotly figures, a DataFrame, a styled
DataFrame with a MultiIndex) executed for real by papermill in the lab's kernel,
so the outputs are exactly what a headless run stores."""

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import nbformat
import pandas as pd
import plotly.graph_objects as go
import pytest

from labkit import cli
from labkit.publish import export, images
from labkit.errors import LabError
from labkit.plots import alt_text
from test_alt_text import pdf_tags

CHROMIUM = "/usr/bin/chromium"
needs_chromium = pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK),
                                    reason=f"{CHROMIUM} is absent: static images need Chromium "
                                           "(sudo apt-get install chromium)")
pytestmark = pytest.mark.timeout(300)

SYNTHETIC_CELLS = [
    ("parameters", 'profile = "full"'),
    (None, "import pandas as pd\nimport plotly.graph_objects as go"),
    (None, 'go.Figure(go.Scatter(x=[3, 10, 100], y=[0.2, 0.9, 4.1], name="iterative"),\n'
           '          layout=dict(title=dict(text="Elapsed time (s) vs <b>clients</b>")))'),
    (None, 'fig = go.Figure(go.Bar(x=["select", "epoll"], y=[120, 80]), layout=dict(title="Latency p99 (µs)"))\n'
           'fig.show()'),
    (None, 'results = pd.DataFrame({"model": ["iterative", "select"], "clients": [10, 10],\n'
           '                        "elapsed_s": [0.512, 0.25], "note": ["a|b", None]})\nresults'),
    (None, 'from IPython.display import display\ndisplay(pd.DataFrame({"error": ["refused"]}))\nprint("done")'),
    (None, 'table = pd.DataFrame({"task-clock": [1.5, 2.25], "cycles": [float("nan"), float("nan")]},\n'
           '    index=pd.MultiIndex.from_tuples([("select", 3), ("select", 100)], names=["model", "clients"]))\n'
           'table.style.format(na_rep="n/a").set_caption("Server counters")'),
]


def _synthetic_notebook() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    for tag, source in SYNTHETIC_CELLS:
        cell = nbformat.v4.new_code_cell(source)
        if tag:
            cell.metadata["tags"] = [tag]
        nb.cells.append(cell)
    return nb


@pytest.fixture(scope="module")
def executed(tmp_path_factory) -> Path:
    """The synthetic notebook after a real papermill run (the lab's own kernel)."""
    work = tmp_path_factory.mktemp("synthetic")
    source = work / "03_synthetic.ipynb"
    nbformat.write(_synthetic_notebook(), source)
    return export.execute([source], work / "executed", profile="quick", timeout_s=180)[0]


def _png(path: Path) -> bool:
    return path.stat().st_size > 100 and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _svg(path: Path) -> bool:
    root = ElementTree.parse(path).getroot()
    return root.tag.endswith("svg") and path.stat().st_size > 100


def _pdf(path: Path) -> bool:
    return path.stat().st_size > 100 and path.read_bytes()[:5] == b"%PDF-"


def test_execute_runs_the_notebook_with_the_profile(executed):
    nb = nbformat.read(executed, as_version=4)
    assert any("profile = \"quick\"" in cell.source for cell in nb.cells)  # papermill's injected cell
    assert len(images.plotly_outputs(nb)) == 2


def test_names_are_stable_and_filesystem_safe():
    assert export.slug("Elapsed time (s) vs <b>clients</b>") == "elapsed-time-s-vs-clients"
    assert export.slug("Latency p99 (µs) / 10 000 clients") == "latency-p99-s-10-000-clients"
    assert len(export.slug("x" * 500)) == export.MAX_NAME
    taken = set()
    assert [export._unique("a", taken) for _ in range(3)] == ["a", "a-2", "a-3"]


def test_tables_read_back_with_multiindex_and_missing_values():
    frame = pd.DataFrame({"task-clock": [1.5, 2.25], "cycles": [float("nan")] * 2},
                         index=pd.MultiIndex.from_tuples([("select", 3), ("select", 100)],
                                                         names=["model", "clients"]))
    for markup in (frame.to_html(), frame.style.format(na_rep="n/a").to_html()):
        table, _ = export.html_table(markup)
        assert list(table.columns) == ["model", "clients", "task-clock", "cycles"]
        assert table["model"].tolist() == ["select", "select"]  # rowspan spread to both rows
        assert table["clients"].tolist() == [3, 100]
        assert table["task-clock"].tolist() == [1.5, 2.25]
        assert "0" not in table["cycles"].astype(str).tolist()  # missing stays missing, never 0


@needs_chromium
def test_export_writes_every_format_and_an_index(executed, tmp_path):
    out = tmp_path / "export"
    report = export.export([executed], out)

    assert report.static_images and not report.message
    assert [f.name for f in report.figures] == ["03_synthetic--elapsed-time-s-vs-clients",
                                                "03_synthetic--latency-p99-s"]
    for figure in report.figures:
        base = out / figure.name
        assert _png(base.with_suffix(".png")), figure.name
        assert _svg(base.with_suffix(".svg")), figure.name
        assert _pdf(base.with_suffix(".pdf")), figure.name
        # kaleido's PDF, tagged: its one figure's alternative text is the figure's description
        (kind, alt, _), = pdf_tags(base.with_suffix(".pdf").read_bytes())["figures"]
        assert kind == "/Figure" and alt == alt_text.describe(go.Figure(figure.spec, skip_invalid=True))
        page = base.with_suffix(".html").read_text()
        assert "plotly.min.js" in page and "Plotly.newPlot" in page
    assert (out / "plotly.min.js").stat().st_size > 1_000_000  # the HTML figures work offline

    assert [t.caption for t in report.tables] == ["results", "table 2", "Server counters"]
    results, displayed, counters = report.tables
    assert list(displayed.frame.columns) == ["error"]  # the default 0..n-1 index is dropped
    csv = pd.read_csv(out / f"{results.name}.csv")
    assert csv["elapsed_s"].tolist() == [0.512, 0.25]
    assert "| iterative | 10 | 0.512 | a\\|b |" in (out / f"{results.name}.md").read_text()
    tex = (out / f"{counters.name}.tex").read_text()
    assert "\\begin{tabular}" in tex and "\\caption{Server counters}" in tex and "n/a" in tex
    assert "select & 100 & 2.25 & n/a" in tex  # numbers as shown, not 2.250000

    index = (out / "index.html").read_text()
    for figure in report.figures:
        for fmt in ("png", "svg", "pdf", "html"):
            assert f"href='{figure.name}.{fmt}'" in index
        assert f"<img src='{figure.name}.png'" in index
    for table in report.tables:
        for fmt in ("csv", "md", "tex"):
            assert f"href='{table.name}.{fmt}'" in index
    linked = {line.split("'")[0] for line in index.split("href='")[1:]}
    assert all((out / name).is_file() for name in linked)


@needs_chromium
def test_exported_notebook_carries_images_nbconvert_shows(executed, tmp_path):
    out = tmp_path / "export"
    export.export([executed], out)
    copy = out / "notebooks" / executed.name
    nb = nbformat.read(copy, as_version=4)
    plots = images.plotly_outputs(nb)
    assert len(plots) == 2
    for output in plots:
        assert output.data["image/png"].startswith("iVBORw0KGgo")  # base64 of the PNG magic
    converted = subprocess.run([str(Path(sys.executable).with_name("jupyter")), "nbconvert", "--to", "html",
                                "--output-dir", str(tmp_path / "html"), str(copy)],
                               capture_output=True, text=True, timeout=120)
    assert converted.returncode == 0, converted.stderr
    page = (tmp_path / "html" / copy.with_suffix(".html").name).read_text()
    assert len(re.findall(r'<img [^>]*src="data:image/png;base64,', page)) == 2


@needs_chromium
def test_embed_in_place_on_a_given_notebook(executed, tmp_path):
    given = tmp_path / executed.name
    given.write_bytes(executed.read_bytes())
    with images.StaticRenderer() as renderer:
        assert images.embed_images(given, renderer) == 2
    assert all("image/png" in o.data for o in images.plotly_outputs(nbformat.read(given, as_version=4)))


def test_without_chromium_html_and_tables_still_export(executed, tmp_path, monkeypatch):
    monkeypatch.setenv("BROWSER_PATH", str(tmp_path / "no-chromium-here"))
    assert images.find_chromium() is None
    out = tmp_path / "export"
    report = export.export([executed], out)

    assert not report.static_images
    assert "sudo apt-get install chromium" in report.summary()
    assert sorted(p.suffix for p in out.glob("03_synthetic--elapsed*")) == [".html"]
    assert len(list(out.glob("*.csv"))) == 3
    assert "sudo apt-get install chromium" in (out / "index.html").read_text()
    with pytest.raises(LabError, match="no Chrome or Chromium"):
        with images.StaticRenderer():
            pass


def test_cli_export_names_the_fix_when_chromium_is_missing(executed, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BROWSER_PATH", str(tmp_path / "no-chromium-here"))
    out = tmp_path / "export"
    status = cli.main(["export", "--notebooks", str(executed), "--out", str(out)])
    printed = capsys.readouterr().out

    assert status == cli.EXIT_OK
    assert "exported 2 figures and 3 tables" in printed
    assert "sudo apt-get install chromium" in printed
    assert not list(out.glob("*.png"))


def test_cli_export_execute_runs_papermill_first(executed, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BROWSER_PATH", str(tmp_path / "no-chromium-here"))  # HTML only: fast
    source = executed.parent.parent / "03_synthetic.ipynb"
    out = tmp_path / "export"
    status = cli.main(["export", "--execute", "--notebooks", str(source), "--out", str(out)])
    assert status == cli.EXIT_OK, capsys.readouterr().err
    ran = nbformat.read(out / "notebooks" / source.name, as_version=4)
    assert ran.metadata["papermill"]["parameters"] == {"profile": "quick"}
    assert not any(o.output_type == "error" for cell in ran.cells for o in cell.get("outputs", []))
    assert len(list(out.glob("03_synthetic--*.html"))) == 2


def test_cli_export_of_a_missing_notebook_is_a_user_error(tmp_path, capsys):
    status = cli.main(["export", "--notebooks", str(tmp_path / "nope.ipynb"), "--out", str(tmp_path / "o")])
    assert status == cli.EXIT_USER
    assert "no such notebook" in capsys.readouterr().err


@needs_chromium
def test_exporting_again_without_chromium_leaves_no_stale_image(executed, tmp_path, monkeypatch):
    out = tmp_path / "export"
    mine = out / "my-notes.txt"
    export.export([executed], out)
    mine.write_text("not the export's")
    assert len(list(out.glob("*.png"))) == 2
    monkeypatch.setenv("BROWSER_PATH", str(tmp_path / "no-chromium-here"))
    export.export([executed], out)
    assert not list(out.glob("*.png")) and len(list(out.glob("*.csv"))) == 3
    assert mine.read_text() == "not the export's"


def test_a_browser_that_does_not_start_still_exports_html(executed, tmp_path, monkeypatch):
    monkeypatch.setenv("BROWSER_PATH", "/bin/false")  # exists and runs, but is no browser
    report = export.export([executed], tmp_path / "export")
    assert not report.static_images
    assert "did not start" in report.message and "sudo apt-get install chromium" in report.message
    assert len(list((tmp_path / "export").glob("*.html"))) == 3  # two figures and the index


def test_bad_input_says_what_to_do(tmp_path):
    with pytest.raises(LabError, match="no such notebook") as raised:
        export.export([tmp_path / "missing.ipynb"], tmp_path / "out")
    assert "--execute" in raised.value.fix
    unexecuted = tmp_path / "fresh.ipynb"
    nbformat.write(_synthetic_notebook(), unexecuted)
    report = export.export([unexecuted], tmp_path / "out")
    assert "were they executed?" in report.message and "--execute" in report.message
