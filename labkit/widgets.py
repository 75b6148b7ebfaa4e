"""One control panel per experiment: the notebook's parameters as widgets, a Run
button, live progress, errors a student can act on, the figure and the table.

The panel's fields are exactly the notebook's parameters, so what a student
chooses here and what papermill passes with -p are the same thing.  The figure
is a plain plotly go.Figure shown in an Output widget: plotly 7's FigureWidget
needs anywidget, and a plain figure renders the same in JupyterLab 4, in a
saved notebook and in an exported one.
"""

from __future__ import annotations

import html
import re

import ipywidgets as w
from IPython.display import HTML, Markdown, display

from labkit import build, experiments, paths, plots, sweep
from labkit.errors import BuildError, LabError

# The panel's fields, in the order of the notebook's parameters cell.
FIELDS = ("models", "clients", "requests", "repeats", "k", "server_cpus", "client_cpus")

# What the figure can show: label -> sweep column.
PLOTTABLE = {
    "elapsed time": "elapsed_s",
    "server context switches": "server_context-switches",
    "server task-clock": "server_task-clock",
    "client task-clock": "client_task-clock",
    "latency p50": "lat_p50_us",
    "latency p99": "lat_p99_us",
    "throughput": "throughput_rps",
    "server cycles": "server_cycles",
}


class ControlPanel:
    """ControlPanel("proc_top", params) where params = experiments.resolve(...).

    .run() reads the fields, resolves and validates them, runs the sweep into
    `results` (a JSON Lines path; None = data/results/<experiment>.jsonl) and
    refreshes the figure and the counters table.  After a run: .df, .figure,
    .params."""

    def __init__(self, experiment: str, params: dict, results=None, metric: str = "elapsed_s"):
        self.experiment = experiment
        self.profile = params.get("profile", "full")
        self.params = params
        self.results = results
        self.df = None
        self.figure = None
        self.last_error = None  # the LabError the panel last showed, if any

        self.model_boxes = {m: w.Checkbox(value=m in params["models"], description=m, indent=False,
                                          layout=w.Layout(width="auto"))
                            for m in build.models()}
        self.fields = {
            "models": w.HBox(list(self.model_boxes.values())),
            "clients": w.IntsInput(value=list(params["clients"]), min=1),
            "requests": w.BoundedIntText(value=params["requests"], min=1, max=1_000_000),
            "repeats": w.BoundedIntText(value=params["repeats"], min=1, max=100),
            "k": w.BoundedIntText(value=params["k"], min=1, max=1000),
            "server_cpus": w.Text(value=_cpu_text(params["server_cpus"]), placeholder="e.g. 0 or 0,1"),
            "client_cpus": w.Text(value=_cpu_text(params["client_cpus"]), placeholder="e.g. 1"),
        }
        help_lines = experiments.get(experiment).help
        rows = [w.HBox([w.Label(name, layout=w.Layout(width="110px")), field,
                        w.HTML(f"<span style='color:#666'>{html.escape(help_lines.get(name, ''))}</span>")])
                for name, field in self.fields.items()]

        self.plot_choice = w.Dropdown(options=list(PLOTTABLE.items()), value=metric, description="plot")
        self.plot_choice.observe(lambda change: self._refresh_figure(), names="value")
        self.run_button = w.Button(description="Run", button_style="primary", icon="play")
        self.run_button.on_click(lambda _button: self.run())
        self.progress = w.IntProgress(value=0, min=0, max=1, layout=w.Layout(width="300px"))
        self.status = w.Label("not run yet")
        self.errors = w.Output()
        self.figure_area = w.Output()
        self.table_area = w.Output()
        self.box = w.VBox([
            w.HTML(f"<b>{html.escape(experiments.get(experiment).title)}</b> "
                   f"(profile <code>{html.escape(self.profile)}</code>)"),
            *rows,
            w.HBox([self.run_button, self.progress, self.status]),
            self.errors, self.plot_choice, self.figure_area, self.table_area,
        ])

    # -- reading the fields ------------------------------------------------
    def values(self) -> dict:
        """The fields as the notebook's parameters (not yet validated)."""
        return {
            "models": [m for m, box in self.model_boxes.items() if box.value],
            "clients": list(self.fields["clients"].value),
            "requests": self.fields["requests"].value,
            "repeats": self.fields["repeats"].value,
            "k": self.fields["k"].value,
            "server_cpus": self.fields["server_cpus"].value,
            "client_cpus": self.fields["client_cpus"].value,
        }

    def set(self, **values) -> None:
        """Fill fields from parameter values (what a student would type)."""
        unknown = sorted(set(values) - set(FIELDS))
        if unknown:
            raise LabError(f"the panel has no field {', '.join(unknown)}", f"its fields are: {', '.join(FIELDS)}")
        for name, value in values.items():
            if name == "models":
                for model, box in self.model_boxes.items():
                    box.value = model in value
            elif name in ("server_cpus", "client_cpus"):
                self.fields[name].value = _cpu_text(value)
            elif name == "clients":
                self.fields[name].value = list(value)
            else:
                self.fields[name].value = value

    # -- running -----------------------------------------------------------
    def run(self):
        """Resolve the fields, run the sweep, refresh figure and table.  Returns the
        DataFrame, or None when a LabError was shown in the panel instead."""
        self.errors.clear_output()
        self.last_error = None
        self.run_button.disabled = True
        try:
            self.params = experiments.resolve(self.experiment, self.profile, **self.values())
            self.progress.value, self.progress.bar_style = 0, ""
            self.status.value = "starting..."
            self.df = sweep.run(self.experiment, self.params, results=self.results,
                                progress=self._on_progress)
        except LabError as problem:
            self.last_error = problem
            self.progress.bar_style = "danger"
            self.status.value = "stopped: see the message below"
            with self.errors:
                display(HTML(error_html(problem)))
            return None
        finally:
            self.run_button.disabled = False
        failed = int((self.df["status"] != "ok").sum()) if "status" in self.df else 0
        self.progress.bar_style = "warning" if failed else "success"
        self.status.value = f"done: {len(self.df)} points" + (f", {failed} failed" if failed else "")
        self._refresh_figure()
        self._refresh_table()
        return self.df

    def _on_progress(self, done: int, total: int, row: dict) -> None:
        self.progress.max = total
        self.progress.value = done
        self.status.value = f"{done}/{total}: {row.get('model')} x {row.get('clients')} clients, {row.get('status')}"

    def _refresh_figure(self) -> None:
        if self.df is None or self.df.empty:
            return
        self.figure = plots.metric_vs_clients(self.df, self.plot_choice.value)
        with self.figure_area:
            self.figure_area.clear_output(wait=True)
            display(self.figure)

    def _refresh_table(self) -> None:
        warning = plots.saturation_warning(self.df)
        with self.table_area:
            self.table_area.clear_output(wait=True)
            if warning:
                display(HTML(f"<p style='color:#B00020'><b>{html.escape(warning)}</b></p>"))
            display(plots.style_counters(plots.counters_table(self.df, "server")))

    # -- display -------------------------------------------------------------
    def show(self) -> None:
        display(self.box)

    def _ipython_display_(self) -> None:
        self.show()


def error_html(problem: LabError) -> str:
    """A LabError as a student should see it: what happened, what to do (no traceback)."""
    parts = [f"<div style='border-left:4px solid #B00020;padding:4px 10px;background:#FDECEA'>",
             f"<b>Problem:</b> {html.escape(problem.what)}"]
    if isinstance(problem, BuildError) and problem.output:
        parts.append(f"<pre style='white-space:pre-wrap'>{html.escape(problem.output)}</pre>")
    if problem.fix:
        parts.append(f"<br><b>What to do:</b> {html.escape(problem.fix)}")
    parts.append("</div>")
    return "".join(parts)


def _cpu_text(cpus) -> str:
    if isinstance(cpus, str):
        return cpus
    return ",".join(str(c) for c in cpus)


def friendly_errors() -> None:
    """In this IPython kernel, show a LabError as what + fix (error_html), not as a
    traceback; the cell still fails, so papermill still stops there."""
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        return

    def show(shell, etype, value, tb, tb_offset=None):
        display(HTML(error_html(value)))

    shell.set_custom_exc((LabError,), show)


def c_function(relative_path: str, name: str) -> tuple[int, int, str]:
    """(first line, last line, text) of the C function `name` in csrc/<relative_path>.

    Found by its definition (a line starting at column 0 that contains `name(`)
    up to the closing brace at column 0, so the excerpt follows the file as a
    student edits it."""
    path = paths.CSRC / relative_path
    if not path.is_file():
        raise LabError(f"{path} does not exist", "restore it from git: git checkout -- csrc/")
    lines = path.read_text().splitlines()
    definition = re.compile(rf"^[A-Za-z_].*\b{re.escape(name)}\(")
    for start, line in enumerate(lines):
        if definition.match(line) and not line.rstrip().endswith(";"):
            for end in range(start, len(lines)):
                if lines[end] == "}":
                    return start + 1, end + 1, "\n".join(lines[start:end + 1])
    raise LabError(f"no function {name}() in {path}", f"look at the file: less {path}")


def show_source(relative_path: str, *functions: str) -> None:
    """Display C functions from csrc/ as highlighted code, with file and line numbers."""
    for name in functions:
        first, last, text = c_function(relative_path, name)
        display(Markdown(f"`csrc/{relative_path}`, lines {first}-{last}:\n```c\n{text}\n```"))
