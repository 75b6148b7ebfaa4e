"""A control panel for any experiment: its parameters as fields, a Run button, live
progress, errors a student can act on, the experiment's figures and the table.

Everything comes from the experiment's declaration: a field per parameter a
student chooses (its kind makes the widget and reads it back), the figures it
offers, its x axis.  Above the Run button the panel says how long the sweep the fields
describe will take on this machine (labkit.sweep_time, from what was measured here), and
takes a time budget: no point starts once it is spent, and a next Run measures the rest.
It also takes a target: each point repeated until the median of the plotted figure is known
to within that many percent at 95% (labkit.repeat_until), and says after the Run where it
was reached and what was, where not.  What the sweep says as it runs (what waits for an
exercise, CPUs shared with another lab run, the time budget) is said inside the panel, under its
status line, once the Run ends: nothing of a Run is left outside the panel, and its estimate of
the points still to measure is the line above Run, refreshed, never a stale copy under the
results.  So what a student chooses here and what papermill passes with -p are the same
thing.  The figure is a plain plotly go.Figure shown in an Output widget: plotly 7's
FigureWidget needs anywidget, and a plain figure renders the same in JupyterLab 4, in a
saved notebook and in an exported one.
"""

from __future__ import annotations

import html
import json

import ipywidgets as w
import plotly.graph_objects as go
from IPython.display import HTML, display
from IPython.utils.capture import capture_output

from labkit import plots, repeat_until, sweep
from labkit.errors import LabError
from labkit.friendly import Note, error_html
from labkit.row import OK


def _summary(df) -> tuple[str, str, list[str]]:
    """The progress bar's style and the status line after a run, and each distinct sentence
    of the points that wait for an unsolved exercise (labkit.exercises): those are not
    counted as failed."""
    status = df["status"] if "status" in df else None
    if status is None:
        return "success", f"done: {len(df)} points", []
    waiting = plots.waits_for_exercise(df)
    failed = int(((status != OK) & ~waiting).sum())
    waits = df[waiting]  # none where the results have no such column (saved before there was one)
    labels = sorted(set(waits["waiting_for_exercise"])) if len(waits) else []
    parts = [f"done: {len(df)} points"] + ([f"{failed} failed"] if failed else []) + \
        ([f"{len(waits)} not measurable until exercise {' and '.join(labels)}"] if labels else [])
    style = "warning" if failed or labels else "success"
    return style, ", ".join(parts), list(dict.fromkeys(waits["error"])) if len(waits) else []


def _why_failed(df, shown: int = 3) -> list[str]:
    """Each distinct reason the failed points (not those that wait for an exercise) gave, in
    their own words (the server's or the load generator's), once, with the points that gave
    it: under the panel, where a student reads it (the figure's crosses say it on hover only)."""
    failed = plots.failed_points(df[~plots.waits_for_exercise(df)])
    if failed.empty:
        return []
    axes = [c for c in failed.columns if c not in ("model", "error", "repeat")]

    def point(row) -> str:  # "epoll, offered rate (requests/s) 3000"
        return ", ".join([*([str(row.model)] if "model" in failed else []),
                          *(f"{plots.axis_title(df, c)} {plots.value_text(df, c, getattr(row, c))}" for c in axes)])

    lines = []
    for reason, rows in failed.groupby(failed["error"].fillna("no reason recorded").astype(str), sort=False):
        points = list(dict.fromkeys(point(row) for row in rows.itertuples(index=False)))
        named = "; ".join(points[:shown]) + (f"; and {len(points) - shown} more" if len(points) > shown else "")
        lines.append(f"{len(rows)} failed ({named}): {reason}")
    return lines


def _estimate_text(plan, results, until=None) -> str:
    """The sentence sweep.run says before it measures (its estimate), or "" when it cannot say one."""
    try:
        return sweep.how_long(plan, results, until=until).sentence()
    except (LabError, ValueError, TypeError):
        return ""


def _said(captured, estimate: str, skip=()) -> list:
    """What a sweep said while it ran (`captured`: IPython's capture_output), each line once, as
    the notebook would have shown it, but its estimate of the time (`estimate`, which the line
    above Run says, refreshed) and the lines in `skip` (the target's summary: its own line says it)."""
    texts = [str(output.data.get("text/plain", "")) for output in captured.outputs]
    texts += captured.stdout.splitlines()  # display() without a notebook's kernel prints
    shown, seen = [], set(skip)
    for text in texts:
        if not text.strip() or text in seen or (estimate and text.startswith(estimate)):
            continue
        seen.add(text)
        shown.append(Note(text))
    return shown


def _show_in(area: w.Output, *objects) -> None:
    """Make `objects` the whole content of `area`.

    The output state is set directly, with each object's display data computed
    here, rather than captured with `with area: clear_output(wait=True);
    display(...)`: under papermill that capture sometimes never completed and
    the cell hung after the sweep had finished."""
    area.outputs = tuple({"output_type": "display_data", "data": data, "metadata": {}}
                         for obj in objects for data in _display_data(obj))


def _display_data(obj) -> list[dict]:
    if isinstance(obj, go.Figure):  # what JupyterLab's plotly renderer draws, then the figure as text
        return [{"application/vnd.plotly.v1+json": json.loads(obj.to_json()), "text/plain": repr(obj)},
                {"text/html": plots.alt_text.as_html(obj), "text/plain": plots.alt_text.describe(obj)}]
    return [{"text/html": obj._repr_html_(), "text/plain": str(obj) if isinstance(obj, str) else repr(obj)}]


def _on_change(widget, callback) -> None:
    """Call `callback` when the value of `widget` changes, or of any of its children (a row of
    checkboxes)."""
    if hasattr(widget, "children") and not hasattr(widget, "value"):
        for child in widget.children:
            _on_change(child, callback)
    else:
        widget.observe(callback, names="value")


def _named(field, name: str) -> list:
    """`field` with `name` as its label, visible and tied to its input (ipywidgets writes a
    widget's description as a <label for=...> of it: a screen reader reads the name when the
    field has focus); a row of checkboxes, each labelled already, gets the name as a label beside it."""
    if hasattr(field, "description") and hasattr(field, "value"):
        field.description = name
        field.style.description_width = LABEL_WIDTH
        if field.layout.width is None:
            field.layout.width = f"calc({LABEL_WIDTH} + 300px)"
        return [field]
    return [w.Label(name, layout=w.Layout(width=LABEL_WIDTH)), field]


LABEL_WIDTH = "140px"  # link_loss_percent, whole

# Where the keyboard is, seen: ipywidgets draws a button's focus as a 1 px ring at 2.2:1, so the
# panel's controls get a 3 px ring at 6.7:1 on the white around it (WCAG 2.1 2.4.7 and 1.4.11),
# only when focus came by keyboard (:focus-visible), not on every click.
PANEL_CLASS = "labkit-panel"
FOCUS_STYLE = (f"<style>.{PANEL_CLASS} :is(button, input, select, textarea, summary):focus-visible "
               "{outline: 3px solid #0B5CAD !important; outline-offset: 2px;}</style>")


def help_html(text: str) -> str:
    """A parameter's help line as the panel shows it: escaped, `code` as code (a student saw the
    backticks themselves)."""
    import re

    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


class ControlPanel:
    """ControlPanel(plan) where plan = experiments.resolve(...): its fields start at the
    plan's values.

    .run() reads the fields into a new plan (plan.with_values: the fields' values checked,
    the plan's other values kept), runs the sweep into `results` (a JSON Lines path; None =
    data/results/<experiment>.jsonl) and refreshes the figure and the counters table.
    After a run: .df, .figure, .plan."""

    def __init__(self, plan, results=None, metric: str | None = None):
        self.experiment = plan.experiment
        self.profile = plan.profile
        self.plan = plan
        self.results = results
        self.df = None
        self.figure = None
        self.last_error = None  # the LabError the panel last showed, if any

        self.names = tuple(p.name for p in self.experiment.fields)
        self.fields = {p.name: p.kind.widget(plan[p.name]) for p in self.experiment.fields}
        # A value a field cannot take is explained under the field, as soon as it is typed.
        self.messages = {p.name: w.HTML() for p in self.experiment.fields}
        for param in self.experiment.fields:
            _on_change(self.fields[param.name], lambda change, param=param: self._check_field(param))
        rows = [w.VBox([w.HBox([*_named(self.fields[p.name], p.name),
                                w.HTML(f"<span style='color:#666'>{help_html(p.help)}</span>")]),
                        self.messages[p.name]])
                for p in self.experiment.fields]

        options = [(plots.label(f.metric), f.metric) for f in self.experiment.figures]
        self.plot_choice = w.Dropdown(options=options, value=metric or options[0][1], description="plot")
        self.plot_choice.observe(lambda change: self._refresh_figure(), names="value")
        self.budget = w.BoundedFloatText(value=0, min=0, max=24 * 60, step=1, description="budget (min)",
                                         layout=w.Layout(width="190px"), style={"description_width": "90px"})
        self.target = w.BoundedFloatText(value=0, min=0, max=99, step=1, description="target (±%)",
                                         layout=w.Layout(width="190px"), style={"description_width": "90px"})
        self.most = w.BoundedIntText(value=repeat_until.Target.most, min=repeat_until.LEAST_FOR_95, max=100,
                                     description="at most",
                                     layout=w.Layout(width="160px"), style={"description_width": "60px"})
        self.estimate_line = w.HTML()
        self.target_line = w.HTML()
        for param in self.experiment.fields:
            _on_change(self.fields[param.name], lambda change: self._refresh_estimate())
        self.run_button = w.Button(description="Run", button_style="primary", icon="play")
        self.run_button.on_click(lambda _button: self.run())
        self.progress = w.IntProgress(value=0, min=0, max=1, layout=w.Layout(width="300px"))
        self.status = w.HTML()
        self.status_text = ""
        self._say("not run yet")
        self.errors = w.Output()
        self.said = w.Output()  # what the sweep said during the last Run (_said), but its estimate
        self.figure_area = w.Output()
        self.table_area = w.Output()
        self.box = w.VBox([
            w.HTML(FOCUS_STYLE),
            w.HTML(f"<b>{html.escape(self.experiment.title)}</b> "
                   f"(profile <code>{html.escape(self.profile)}</code>)"),
            *rows,
            w.HBox([self.budget, w.HTML("<span style='color:#666'>time budget in minutes (0: none): no point "
                                        "starts once it is spent; Run again for the rest</span>")]),
            w.HBox([self.target, self.most, w.HTML(
                "<span style='color:#666'>repeat each point until the median of the plotted figure is known "
                f"to ± this many percent at 95% (0: just the repeats above; the first {repeat_until.FIRST} "
                "repeats size each point), at most this many repeats</span>")]),
            self.estimate_line,
            w.HBox([self.run_button, self.progress, self.status]),
            self.target_line, self.said,
            self.errors, self.plot_choice, self.figure_area, self.table_area,
        ])
        self.box.add_class(PANEL_CLASS)

    # -- reading and filling the fields ----------------------------------------
    def values(self) -> dict:
        """The fields as the notebook's parameters (not yet validated)."""
        return {p.name: p.kind.read(self.fields[p.name]) for p in self.experiment.fields}

    def set(self, **values) -> None:
        """Fill fields from parameter values (what a student would type)."""
        unknown = sorted(set(values) - set(self.names))
        if unknown:
            raise LabError(f"the panel has no field {', '.join(unknown)}",
                           f"its fields are: {', '.join(self.names)}")
        for name, value in values.items():
            self.experiment.param(name).kind.show(self.fields[name], value)

    def _check_field(self, param) -> bool:
        """Check one field's value by its parameter's kind; say what is wrong under it."""
        try:
            param.kind.check(param.name, param.kind.read(self.fields[param.name]))
        except LabError as problem:
            self.messages[param.name].value = (f"<span style='color:#b00020'>{html.escape(problem.what)}: "
                                               f"{html.escape(problem.fix)}</span>")
            return False
        self.messages[param.name].value = ""
        return True

    # -- running -----------------------------------------------------------
    def run(self):
        """Resolve the fields, run the sweep, refresh figure and table.  Returns the
        DataFrame, or None when a LabError was shown in the panel instead."""
        _show_in(self.errors)
        _show_in(self.said)
        self.last_error = None
        self.run_button.disabled = True
        try:
            for param in self.experiment.fields:
                self._check_field(param)  # every rejected value explained where it was typed
            self.plan = self.plan.with_values(**self.values())
            self.progress.value, self.progress.bar_style = 0, ""
            self._say("starting...")
            until = repeat_until.Target(self.plot_choice.value, self.target.value / 100, self.most.value) \
                if self.target.value else None
            self.target_line.value = ""
            before = _estimate_text(self.plan, self.results, until)
            with capture_output(stdout=True, stderr=False, display=True) as said:
                try:
                    self.df = sweep.run(self.plan, results=self.results, progress=self._on_progress,
                                        budget_s=self.budget.value * 60 or None, until=until)
                finally:
                    _show_in(self.said, *_said(said, before))  # a failed Run's too
        except LabError as problem:
            self.last_error = problem
            self.progress.bar_style = "danger"
            self._say("stopped: see the message below", urgent=True)
            _show_in(self.errors, HTML(error_html(problem)))
            return None
        finally:
            self.run_button.disabled = False
        self.progress.bar_style, ended, waits = _summary(self.df)
        failures = _why_failed(self.df)
        if waits or failures:  # the lab's stub (said once, with what to do), then the points' own reasons
            _show_in(self.errors, HTML("".join(f"<p>{html.escape(sentence)}</p>" for sentence in waits)
                                       + "".join(f"<p><b>why:</b> {html.escape(line)}</p>" for line in failures)))
        if until is not None:
            summary = repeat_until.summary(until, self.df.attrs["reached"], self.experiment.axis_columns)
            self.target_line.value = f"<span style='color:#444'>{html.escape(summary)}</span>"
            _show_in(self.said, *_said(said, before, [summary]))
        if self.df.attrs.get("unmeasured"):
            ended += f"; {self.df.attrs['unmeasured']} left by the time budget: Run again for them"
        self._say(ended, urgent=True)  # a run's end: said once, after minutes, worth hearing
        self._refresh_estimate()
        self._refresh_figure()
        self._refresh_table()
        return self.df

    def _refresh_estimate(self) -> None:
        """Say how long a Run of the fields' values would take here (nothing while a field is
        wrong: its own message says why)."""
        try:
            until = repeat_until.Target(self.plot_choice.value, self.target.value / 100, self.most.value) \
                if self.target.value else None  # the repeats a target may add, counted
            took = sweep.how_long(self.plan.with_values(**self.values()), self.results, until=until)
        except (LabError, ValueError, TypeError):
            self.estimate_line.value = ""
            return
        self.estimate_line.value = f"<span style='color:#444'>{html.escape(took.sentence())}</span>"

    def _on_progress(self, done: int, total: int, row: dict) -> None:
        self.progress.max = total
        self.progress.value = done
        where = ", ".join(f"{p.column} {row.get(p.column)}" for p in self.experiment.axes)
        self._say(f"{done}/{total}: {where}: {row.get('status')}")

    def _refresh_figure(self) -> None:
        if self.df is None or self.df.empty:
            return
        self.figure = self.experiment.plot(self.df, self.plot_choice.value)
        _show_in(self.figure_area, self.figure)

    def _refresh_table(self) -> None:
        warning = self.experiment.saturation_warning(self.df)
        table = plots.counters_table(self.df, "server")
        colour = "#444" if self.experiment.client_is_subject else "#B00020"
        shown = [HTML(f"<p style='color:{colour}'><b>{html.escape(warning)}</b></p>")] if warning else []
        _show_in(self.table_area, *shown, plots.style_counters(table))

    def _say(self, text: str, urgent: bool = False) -> None:
        """The status line beside Run: `text` in a span of role=status (progress) or role=alert
        (a run's end), a status message a screen reader may speak without focus moving (WCAG
        2.1 4.1.3); ipywidgets replaces the HTML, so each call puts in a new span, which not
        every reader announces.  .status_text holds it as plain text."""
        self.status_text = text
        role = "alert" if urgent else "status"
        self.status.value = f"<span role='{role}'>{html.escape(text)}</span>"

    # -- display -------------------------------------------------------------
    def show(self) -> None:
        self._refresh_estimate()
        display(self.box)

    def _ipython_display_(self) -> None:
        self.show()
