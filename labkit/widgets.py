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
import json
import re

import ipywidgets as w
import plotly.graph_objects as go
from IPython.display import HTML, Markdown, display

from labkit import build, experiments, paths, plots, sweep
from labkit.errors import BuildError, LabError

# Parameters an experiment fixes (its workload), so neither its notebook nor its panel offers them.
NOT_FIELDS = ("service", "engine")


def fields_of(experiment: str) -> tuple[str, ...]:
    """The panel's fields for `experiment`: its parameters, in order, but the fixed ones."""
    return tuple(name for name in experiments.get(experiment).parameters if name not in NOT_FIELDS)


# proc_top's fields, in the order of notebook 01's parameters cell.
FIELDS = fields_of("proc_top")

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
    "lost connections": "lost_connections",
    "server CPU time per request": "server_cpu_us_per_request",
    "server context switches per request": "server_cs_per_request",
}
# Fields that are lists of whole numbers (IntsInput) and their smallest value.
_INT_LISTS = {"clients": 1, "exchanges": 1, "idle": 0}


def _show_in(area: w.Output, *objects) -> None:
    """Make `objects` the whole content of `area`.

    The output state is set directly, with each object's display data computed
    here, rather than captured with `with area: clear_output(wait=True);
    display(...)`: under papermill that capture sometimes never completed and
    the cell hung after the sweep had finished."""
    area.outputs = tuple({"output_type": "display_data", "data": _display_data(obj), "metadata": {}}
                         for obj in objects)


def _display_data(obj) -> dict:
    if isinstance(obj, go.Figure):  # what JupyterLab's plotly renderer draws
        return {"application/vnd.plotly.v1+json": json.loads(obj.to_json()), "text/plain": repr(obj)}
    return {"text/html": obj._repr_html_(), "text/plain": repr(obj)}


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

        self.names = fields_of(experiment)
        self.model_boxes = {m: w.Checkbox(value=m in params["models"], description=m, indent=False,
                                          layout=w.Layout(width="auto"))
                            for m in build.models()}
        self.fields = {name: self._field(name, params[name]) for name in self.names}
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

    def _field(self, name: str, value):
        """The widget for parameter `name`, chosen by what the parameter holds."""
        if name == "models":
            # a dozen models: let the checkboxes wrap instead of running off the panel
            return w.HBox(list(self.model_boxes.values()),
                          layout=w.Layout(flex_flow="row wrap", max_width="560px", grid_gap="0 12px"))
        if name in _INT_LISTS:
            return w.IntsInput(value=list(value), min=_INT_LISTS[name])
        if name in ("server_cpus", "client_cpus"):
            return w.Text(value=_cpu_text(value), placeholder="e.g. 0 or 0,1" if name == "server_cpus" else "e.g. 1")
        if name == "workers":  # empty: the server's default
            return w.Text(value="" if value is None else str(value), placeholder="one per CPU")
        if name == "warmup":
            return w.Text(value=str(value), placeholder="e.g. 1s or 1000")
        if isinstance(value, float):
            return w.BoundedFloatText(value=value, min=0.001, max=1e9)
        return w.BoundedIntText(value=value, min=1, max=1_000_000)

    # -- reading the fields ------------------------------------------------
    def values(self) -> dict:
        """The fields as the notebook's parameters (not yet validated)."""
        values = {}
        for name, field in self.fields.items():
            if name == "models":
                values[name] = [m for m, box in self.model_boxes.items() if box.value]
            elif name in _INT_LISTS:
                values[name] = list(field.value)
            elif name == "workers":
                values[name] = field.value.strip() or None
            else:
                values[name] = field.value
        return values

    def set(self, **values) -> None:
        """Fill fields from parameter values (what a student would type)."""
        unknown = sorted(set(values) - set(self.names))
        if unknown:
            raise LabError(f"the panel has no field {', '.join(unknown)}",
                           f"its fields are: {', '.join(self.names)}")
        for name, value in values.items():
            if name == "models":
                for model, box in self.model_boxes.items():
                    box.value = model in value
            elif name in ("server_cpus", "client_cpus"):
                self.fields[name].value = _cpu_text(value)
            elif name in _INT_LISTS:
                self.fields[name].value = list(value)
            elif name in ("workers", "warmup"):
                self.fields[name].value = "" if value is None else str(value)
            else:
                self.fields[name].value = value

    # -- running -----------------------------------------------------------
    def run(self):
        """Resolve the fields, run the sweep, refresh figure and table.  Returns the
        DataFrame, or None when a LabError was shown in the panel instead."""
        _show_in(self.errors)
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
            _show_in(self.errors, HTML(error_html(problem)))
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
        where = f"{row.get('clients')} clients" + (f" + {row.get('idle')} idle" if row.get("idle") else "")
        self.status.value = f"{done}/{total}: {row.get('model')} x {where}, {row.get('status')}"

    def _refresh_figure(self) -> None:
        if self.df is None or self.df.empty:
            return
        metric = self.plot_choice.value
        if "idle" in self.names:
            self.figure = plots.metric_vs_idle(self.df, metric)
        elif "exchanges" in self.names:
            self.figure = plots.metric_by_model(self.df, metric, include_failed=metric == "lost_connections")
        else:
            self.figure = plots.metric_vs_clients(self.df, metric)
        _show_in(self.figure_area, self.figure)

    def _refresh_table(self) -> None:
        warning = plots.saturation_warning(self.df)
        df = self.df
        if "idle" in self.names:  # one row per model x idle connections
            df = df.assign(clients=df["idle"])
        table = plots.counters_table(df, "server")
        if "idle" in self.names:
            table.index = table.index.set_names(["model", "idle"])
        shown = [HTML(f"<p style='color:#B00020'><b>{html.escape(warning)}</b></p>")] if warning else []
        _show_in(self.table_area, *shown, plots.style_counters(table))

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


def show_diff(old_path: str, new_path: str, context: int = 2) -> None:
    """Display `diff -u csrc/<old_path> csrc/<new_path>`, read from the files as they are now."""
    import difflib

    texts = []
    for relative in (old_path, new_path):
        path = paths.CSRC / relative
        if not path.is_file():
            raise LabError(f"{path} does not exist", "restore it from git: git checkout -- csrc/")
        texts.append(path.read_text().splitlines())
    lines = difflib.unified_diff(*texts, f"csrc/{old_path}", f"csrc/{new_path}", n=context, lineterm="")
    display(Markdown("```diff\n" + "\n".join(lines) + "\n```"))


def show_file(relative_path: str) -> None:
    """Display a whole (short) file of csrc/ as highlighted C."""
    path = paths.CSRC / relative_path
    if not path.is_file():
        raise LabError(f"{path} does not exist", "restore it from git: git checkout -- csrc/")
    display(Markdown(f"`csrc/{relative_path}`:\n```c\n{path.read_text()}\n```"))
