"""`labkit export`: every figure and results table of the lab's executed notebooks,
in one folder, for slides and reports.

    export/
      index.html                       every figure (thumbnail) and table, linked
      plotly.min.js                    shared by the interactive HTML figures
      <notebook>--<figure title>.png .svg .pdf .html
      <notebook>--<table>.csv .md .tex
      notebooks/<notebook>.ipynb       the executed notebooks, a PNG beside each plot

Figures are the plotly outputs (application/vnd.plotly.v1+json) of the executed
notebooks.  Tables are their DataFrame outputs (plain or styled), read back from
the HTML the notebook shows with the standard library's parser, so a table is
exported exactly as the student saw it, formatting and "n/a" included.
Names come from the notebook and the figure title (or the cell's expression),
so the same notebook exports to the same file names every time.
"""

from __future__ import annotations

import html
import importlib.util
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go

from .. import launcher, paths, spreadsheet
from ..plots import alt_text
from ..errors import LabError
from .images import CHROMIUM_FIX, IMAGE_FORMATS, PLOTLY_MIME, StaticRenderer, attach_png, find_chromium

DEFAULT_OUT = paths.WORK / "export"
EXECUTE_TIMEOUT_S = 900  # one notebook, quick profile: about a minute; generous for slow machines
TABLE_FORMATS = ("csv", "md", "tex")
MAX_NAME = 60
MANIFEST = ".labkit-export"  # the files the last export wrote, removed by the next one
_EXPORTED_SUFFIXES = {*IMAGE_FORMATS, "html", *TABLE_FORMATS}


@dataclass
class Figure:
    notebook: str  # the notebook's stem, e.g. 01_proc_service
    name: str      # file stem, unique in the export
    title: str
    spec: dict     # the plotly figure as a dict
    output: dict = field(repr=False)  # the notebook output it came from (embed_images writes into it)


@dataclass
class Table:
    notebook: str
    name: str
    caption: str
    frame: pd.DataFrame = field(repr=False)


@dataclass
class ExportReport:
    out_dir: Path
    figures: list[Figure]
    tables: list[Table]
    files: list[Path]
    static_images: bool         # False when Chromium was missing: HTML only
    notebooks: list[str] = field(default_factory=list)  # stems, in the order given
    message: str = ""           # what could not be done and how to fix it
    seconds_per_figure: float = float("nan")  # static images: all formats of one figure

    def summary(self) -> str:
        lines = [f"exported {len(self.figures)} figures and {len(self.tables)} tables "
                 f"({len(self.files)} files) to {self.out_dir}",
                 f"index: {self.out_dir / 'index.html'}"]
        if self.static_images and self.figures:
            lines.append(f"static images: {self.seconds_per_figure:.2f} s per figure (PNG+SVG+PDF, one browser)")
        if self.message:
            lines.append(self.message)
        return "\n".join(lines)


# ---- names -------------------------------------------------------------------------------

def slug(text: str) -> str:
    """A filesystem-safe, lowercase name: markup dropped, runs of other characters become '-'."""
    text = re.sub(r"<[^>]*>", " ", html.unescape(text or ""))
    text = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return text[:MAX_NAME].rstrip("-")


def _unique(name: str, taken: set[str]) -> str:
    candidate, n = name, 2
    while candidate in taken:
        candidate, n = f"{name}-{n}", n + 1
    taken.add(candidate)
    return candidate


def _title(spec: dict) -> str:
    title = (spec.get("layout") or {}).get("title")
    if isinstance(title, dict):
        title = title.get("text")
    return re.sub(r"\s+", " ", re.sub(r"<[^>]*>", " ", str(title or ""))).strip()


def _last_expression(source: str) -> str:
    lines = [line for line in source.strip().splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return lines[-1] if lines else ""


# ---- reading tables back from a notebook's HTML --------------------------------------------

class _TableGrid(HTMLParser):
    """The first <table> of an HTML snippet as header rows and body rows of cell texts,
    with colspan and rowspan spread out (MultiIndex headers and indexes use both)."""

    def __init__(self):
        super().__init__()
        self.head: list[list[str]] = []
        self.body: list[list[str]] = []
        self.caption = ""
        self._section = "body"
        self._row: list | None = None
        self._cell: list[str] | None = None
        self._span = (1, 1)
        self._pending: dict[tuple[int, int], str] = {}  # (row, col) filled by a rowspan above
        self._in_caption = False
        self._depth = 0  # tables seen; only the first is read
        self._done = False

    def handle_starttag(self, tag, attrs):
        if self._done:
            return
        attrs = dict(attrs)
        if tag == "table":
            self._depth += 1
        elif tag == "caption":
            self._in_caption = True
        elif tag == "thead":
            self._section = "head"
        elif tag == "tbody":
            self._section = "body"
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []
            self._span = (int(attrs.get("colspan") or 1), int(attrs.get("rowspan") or 1))

    def handle_endtag(self, tag):
        if self._done:
            return
        if tag == "caption":
            self._in_caption = False
        elif tag in ("td", "th") and self._cell is not None:
            rows = self.head if self._section == "head" else self.body
            row_index = len(rows)
            text = " ".join("".join(self._cell).split())
            colspan, rowspan = self._span
            for _ in range(colspan):
                self._fill_pending(row_index)
                column = len(self._row)
                self._row.append(text)
                for below in range(1, rowspan):
                    self._pending[(row_index + below, column)] = text
            self._cell = None
        elif tag == "tr" and self._row is not None:
            rows = self.head if self._section == "head" else self.body
            self._fill_pending(len(rows), to_end=True)
            rows.append(self._row)
            self._row = None
        elif tag == "thead":
            self._section = "body"
            self._pending.clear()
        elif tag == "table":
            self._done = True

    def _fill_pending(self, row_index: int, to_end: bool = False) -> None:
        while (row_index, len(self._row)) in self._pending:
            self._row.append(self._pending.pop((row_index, len(self._row))))
        if to_end:
            for (r, c) in sorted(k for k in self._pending if k[0] == row_index):
                if c >= len(self._row):
                    self._row.extend([""] * (c - len(self._row)))
                    self._row.append(self._pending.pop((r, c)))

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        elif self._in_caption:
            self.caption += data


def _as_number(column: pd.Series) -> pd.Series:
    """The column as numbers when every non-empty cell is one (thousands separators allowed)."""
    cleaned = column.astype(str).str.replace(",", "", regex=False).str.strip()
    present = cleaned[(cleaned != "") & (cleaned.str.lower() != "nan")]
    numbers = pd.to_numeric(present, errors="coerce")
    if present.empty or numbers.isna().any():
        return column
    return pd.to_numeric(cleaned.where(cleaned != "", None), errors="coerce")


def html_table(markup: str) -> tuple[pd.DataFrame, str]:
    """A DataFrame's HTML (to_html or a Styler) back as a DataFrame, and its caption.

    The index becomes ordinary leading columns; header rows are joined with ' / '."""
    grid = _TableGrid()
    grid.feed(markup)
    if not grid.body:
        raise LabError("an HTML table with no rows", "nothing to export from this output")
    width = max(len(row) for row in grid.head + grid.body)
    pad = lambda row: row + [""] * (width - len(row))  # noqa: E731
    head = [pad(row) for row in grid.head] or [[f"column {i}" for i in range(width)]]
    names = []
    for column in range(width):
        parts = []
        for row in head:
            if row[column] and row[column] not in parts:
                parts.append(row[column])
        names.append(" / ".join(parts) or ("index" if column == 0 else f"column {column}"))
    names = [_unique(name, set(names[:i])) if name in names[:i] else name for i, name in enumerate(names)]
    frame = pd.DataFrame([pad(row) for row in grid.body], columns=names)
    frame = frame.apply(_as_number)
    if names[0] == "index" and frame["index"].tolist() == list(range(len(frame))):
        frame = frame.drop(columns="index")  # a default RangeIndex carries no information
    return frame, " ".join(grid.caption.split())


def _is_dataframe_html(markup: str) -> bool:
    # pandas' own table (class="dataframe") or a Styler's (id="T_...")
    return "<table" in markup and ('class="dataframe"' in markup or re.search(r'<table id="T_', markup) is not None)


# ---- collecting from executed notebooks ----------------------------------------------------

def _write_static_images(report: ExportReport, chromium: str) -> float:
    """PNG, SVG and PDF of every figure from one browser; a PNG beside each plot in its
    notebook.  Returns the seconds per figure, the browser start included."""
    started = time.monotonic()
    with StaticRenderer(chromium) as renderer:
        for figure in report.figures:
            drawn = go.Figure(figure.spec, skip_invalid=True)
            for fmt in IMAGE_FORMATS:
                image = renderer.image(figure.spec, fmt)
                target = report.out_dir / f"{figure.name}.{fmt}"
                # the figure's text alternative travels with it
                target.write_bytes(alt_text.in_svg(image, drawn) if fmt == "svg" else
                                   alt_text.in_png(image, drawn) if fmt == "png" else
                                   alt_text.in_pdf(image, drawn) if fmt == "pdf" else image)
                report.files.append(target)
                if fmt == "png":
                    attach_png(figure.output, image, figure.spec)
    return (time.monotonic() - started) / len(report.figures)


def _stem(notebook_path: Path) -> str:
    return slug(Path(notebook_path).stem).replace("-", "_") or "notebook"


def collect(nb, notebook_path: Path, taken: set[str]) -> tuple[list[Figure], list[Table]]:
    """The figures and results tables of one executed notebook `nb` (nbformat), in
    order, with names not yet in `taken` (which grows)."""
    stem = _stem(notebook_path)
    figures, tables = [], []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for output in cell.get("outputs", []):
            if output.get("output_type") not in ("display_data", "execute_result"):
                continue
            data = output.get("data", {})
            if PLOTLY_MIME in data:
                spec = data[PLOTLY_MIME]
                title = _title(spec)
                name = _unique(f"{stem}--{slug(title) or 'figure'}", taken)
                figures.append(Figure(stem, name, title or name, spec, output))
            elif _is_dataframe_html(markup := "".join(data.get("text/html", ""))):
                frame, caption = html_table(markup)
                # A cell's value is its last expression; a display() call has no such name.
                if not caption and output["output_type"] == "execute_result":
                    caption = _last_expression(cell.source)
                caption = caption or f"table {len(tables) + 1}"
                name = _unique(f"{stem}--{slug(caption)}", taken)
                tables.append(Table(stem, name, caption, frame))
    return figures, tables


# ---- writing -------------------------------------------------------------------------------

def to_markdown(frame: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table (pandas' to_markdown needs tabulate; this does not)."""
    def cell(value) -> str:
        return "—" if pd.isna(value) else str(value).replace("|", "\\|")

    header = "| " + " | ".join(cell(c) for c in frame.columns) + " |"
    rule = "|" + "|".join("---:" if pd.api.types.is_numeric_dtype(frame[c]) else "---"
                          for c in frame.columns) + "|"
    rows = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *rows]) + "\n"


def write_table(table: Table, out_dir: Path) -> list[Path]:
    base = out_dir / table.name
    written = [base.with_suffix(".csv"), base.with_suffix(".md"), base.with_suffix(".tex")]
    spreadsheet.write_frame(table.frame, written[0])  # a server's message is its text
    written[1].write_text(f"Table: {table.caption}\n\n" + to_markdown(table.frame))  # pandoc's caption
    # ".15g": a number read back from the notebook prints as it was shown, not as 912.580000
    written[2].write_text(table.frame.to_latex(index=False, na_rep="—", caption=table.caption,
                                               label=f"tab:{table.name}", escape=True,
                                               float_format=lambda v: format(v, ".15g")))
    return written


def write_figure_html(figure: Figure, out_dir: Path) -> Path:
    target = out_dir / f"{figure.name}.html"
    drawn = go.Figure(figure.spec, skip_invalid=True)
    # "directory": one plotly.min.js beside the files (write_html puts it there), so they open offline
    drawn.write_html(target, include_plotlyjs="directory", full_html=True)
    target.write_text(alt_text.in_html(target.read_text(), drawn))  # named for a screen reader, its text after
    return target


def write_index(report: ExportReport) -> Path:
    """index.html: every figure with a thumbnail and its formats, every table with its formats."""
    esc = html.escape
    parts = ["<!doctype html><html lang='en'><head><meta charset='utf-8'><title>Lab export</title>",
             "<style>body{font-family:sans-serif;margin:2em}figure{display:inline-block;margin:1em;"
             "vertical-align:top;width:340px}img{width:320px;border:1px solid #ccc}"
             "td,th{padding:.2em .6em;text-align:left}</style></head><body>",
             f"<h1>Lab export</h1><p>{len(report.figures)} figures, {len(report.tables)} tables.</p>"]
    if report.message:
        parts.append(f"<p><strong>Note:</strong> {esc(report.message)}</p>")
    for notebook in report.notebooks:
        parts.append(f"<h2>{esc(notebook)}</h2>")
        for figure in (f for f in report.figures if f.notebook == notebook):
            formats = ["html"] + (list(IMAGE_FORMATS) if report.static_images else [])
            links = " ".join(f"<a href='{esc(figure.name)}.{fmt}'>{fmt.upper()}</a>" for fmt in formats)
            described = alt_text.describe(go.Figure(figure.spec, skip_invalid=True))  # the picture, in words
            thumb = (f"<a href='{esc(figure.name)}.html'><img src='{esc(figure.name)}.png' "
                     f"alt='{esc(described)}'></a>" if report.static_images
                     else f"<a href='{esc(figure.name)}.html'>(interactive)</a>")
            parts.append(f"<figure>{thumb}<figcaption>{esc(figure.title)}<br>{links}</figcaption></figure>")
        tables = [t for t in report.tables if t.notebook == notebook]
        if tables:
            parts.append("<table><tr><th>table</th><th>rows x columns</th><th>files</th></tr>")
            for table in tables:
                links = " ".join(f"<a href='{esc(table.name)}.{fmt}'>{fmt.upper()}</a>" for fmt in TABLE_FORMATS)
                rows, columns = table.frame.shape
                parts.append(f"<tr><td><code>{esc(table.caption)}</code></td><td>{rows} x {columns}</td>"
                             f"<td>{links}</td></tr>")
            parts.append("</table>")
    parts.append("</body></html>")
    index = report.out_dir / "index.html"
    index.write_text("\n".join(parts))
    return index


def export(notebooks: list[Path], out_dir: Path = DEFAULT_OUT, embed_in_place: bool = False,
           browser: str | None = None) -> ExportReport:
    """Export every figure and table of the executed `notebooks` into `out_dir`.

    Executed copies with a PNG beside each plot go to out_dir/notebooks/ (and into
    the notebooks themselves with `embed_in_place`).  Without Chromium the HTML
    figures and the tables are still written and report.message says what to install."""
    import nbformat

    missing = [str(nb) for nb in notebooks if not Path(nb).is_file()]
    if missing:
        raise LabError(f"no such notebook: {', '.join(missing)}",
                       "give executed notebooks by path, or use --execute to run the lab's notebooks")
    if not notebooks:
        raise LabError("no notebook to export", "give executed notebooks by path, or use --execute")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "notebooks").mkdir(exist_ok=True)
    _remove_previous_export(out_dir)

    taken: set[str] = set()
    per_notebook = []
    for path in map(Path, notebooks):
        nb = nbformat.read(path, as_version=4)
        figures, tables = collect(nb, path, taken)
        per_notebook.append((path, nb, figures, tables))
    report = ExportReport(out_dir, [f for *_, fs, _ in per_notebook for f in fs],
                          [t for *_, ts in per_notebook for t in ts], [], static_images=False,
                          notebooks=[_stem(path) for path, *_ in per_notebook])

    for table in report.tables:
        report.files += write_table(table, out_dir)
    for figure in report.figures:
        report.files.append(write_figure_html(figure, out_dir))

    chromium = browser or find_chromium()
    if not report.figures:
        report.static_images = chromium is not None
    elif not chromium:
        report.message = (f"PNG, SVG and PDF were not written: no Chrome or Chromium found. "
                          f"To get them: {CHROMIUM_FIX}; then run labkit export again.")
    else:
        try:
            report.seconds_per_figure = _write_static_images(report, chromium)
            report.static_images = True
        except LabError as error:  # the browser did not start: the HTML and tables still count
            report.message = (f"PNG, SVG and PDF were not written: {error.what}. "
                              f"To get them: {error.fix}; then run labkit export again.")

    # attach_png wrote into the notebooks' own outputs: save them.
    for path, nb, _, _ in per_notebook:
        copy = out_dir / "notebooks" / path.name
        nbformat.write(nb, copy)
        report.files.append(copy)
        if embed_in_place and report.static_images:
            nbformat.write(nb, path)
    empty = [path.name for path, _, figures, tables in per_notebook if not figures and not tables]
    if empty:
        hint = (f"no figure or table in {', '.join(empty)}: were they executed? "
                "Run them with labkit export --execute --notebooks ...")
        report.message = f"{report.message} {hint}".strip()
    report.files.append(write_index(report))
    (out_dir / MANIFEST).write_text("".join(f"{path.name}\n" for path in report.files if path.parent == out_dir))
    return report


def _remove_previous_export(out_dir: Path) -> None:
    """Delete the figures and tables an earlier export listed in its manifest, so a
    renamed figure or a run without Chromium leaves no stale file behind.  Only
    names the manifest lists, in the folder itself, are touched."""
    manifest = out_dir / MANIFEST
    if not manifest.is_file():
        return
    for name in manifest.read_text().split("\n"):
        if name and "/" not in name and Path(name).suffix.lstrip(".") in _EXPORTED_SUFFIXES:
            (out_dir / name).unlink(missing_ok=True)
    manifest.unlink()


# ---- re-executing the lab ------------------------------------------------------------------

def execute(notebooks: list[Path], into: Path, profile: str = "quick", kernel: str | None = None,
            timeout_s: float = EXECUTE_TIMEOUT_S) -> list[Path]:
    """Run each notebook with papermill (-p profile <profile>) into `into`; the executed copies.

    Each run has its own results file (into/<name>.results.jsonl, started afresh), so
    an export never mixes its quick points into data/results/.  A run over
    `timeout_s` is stopped with its whole process group."""
    into = Path(into)
    into.mkdir(parents=True, exist_ok=True)
    if importlib.util.find_spec("papermill") is None:
        raise LabError("papermill is not installed in this Python", f"{sys.executable} -m pip install papermill")
    kernel = kernel or _lab_kernel()
    executed = []
    for source in notebooks:
        source = Path(source)
        if not source.is_file():
            raise LabError(f"no such notebook: {source}", f"the lab's notebooks are in {paths.NOTEBOOKS}")
        target = into / source.name
        results = into / f"{source.stem}.results.jsonl"
        results.unlink(missing_ok=True)
        env = dict(os.environ, LABKIT_RESULTS=str(results))
        # papermill, its kernel on Unix sockets (labkit/execute.py says why)
        command = [sys.executable, "-m", "labkit.execute", str(source), str(target), "-p", "profile", profile,
                   "-k", kernel, "--cwd", str(into)]
        run = launcher.spawn(command, "papermill", None, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT)
        try:
            output, _ = launcher.run_to_end(run, timeout_s)
        except subprocess.TimeoutExpired:
            raise LabError(f"{source.name} did not finish within {timeout_s:.0f} s (profile {profile})",
                           f"run it by hand to see where it stops: {' '.join(command)}") from None
        if run.popen.returncode != 0:
            tail = output.decode(errors="replace").strip().splitlines()[-15:]
            raise LabError(f"{source.name} failed under papermill (profile {profile}):\n" + "\n".join(tail),
                           f"open {target} to see the failing cell, fix it, and export again")
        executed.append(target)
    return executed


def _lab_kernel() -> str:
    """The `labkit` kernel when installed (make setup does), else python3."""
    jupyter = Path(sys.executable).with_name("jupyter")
    listed = subprocess.run([str(jupyter), "kernelspec", "list"], capture_output=True, text=True)
    return "labkit" if re.search(r"^\s*labkit\s", listed.stdout, re.M) else "python3"


def lab_notebooks() -> list[Path]:
    """Every notebook of the lab, in order: 00_setup.ipynb, 01_..., as many as there are."""
    return sorted(paths.NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
