"""labkit.panel.ControlPanel: its fields are the notebook's parameters, it runs a
real (tiny) sweep on loopback into a temporary results file, and shows problems
as what + fix instead of a traceback."""

import html
import json

import ipywidgets as widgets
import plotly.graph_objects as go
import psutil
import pytest

from labkit import build, csource, experiments, friendly, paths
from labkit.panel import ControlPanel
from labkit.errors import BuildError, LabError

NOTEBOOK_PARAMETERS = ("models", "clients", "requests", "repeats", "profile_stacks", "k", "server_cpus", "client_cpus",
                       "placement",
                       "link_rate", "link_delay_ms", "link_loss_percent", "link_jitter_ms", "link_mtu")


@pytest.fixture
def panel(tmp_path, built_bin):
    params = experiments.resolve("proc_top", "quick")
    return ControlPanel(params, results=tmp_path / "proc_top.jsonl")


def test_fields_are_exactly_the_notebooks_parameters(panel):
    assert tuple(panel.fields) == NOTEBOOK_PARAMETERS
    assert [box.description for box in panel.fields["models"].children] == build.models()
    assert set(panel.values()) == set(NOTEBOOK_PARAMETERS)
    shown = list(_walk(panel.box))
    for widget in (*panel.fields.values(), panel.run_button, panel.progress, panel.errors):
        assert any(widget is other for other in shown)


def _walk(widget):
    yield widget
    for child in getattr(widget, "children", ()):
        yield from _walk(child)


def test_fields_start_from_the_resolved_parameters(panel):
    quick = experiments.resolve("proc_top", "quick")
    values = panel.values()
    assert values["models"] == [m for m in build.models() if m in quick["models"]]
    assert values["clients"] == quick["clients"]
    assert (values["requests"], values["repeats"], values["k"]) == (quick["requests"], quick["repeats"], quick["k"])
    assert values["server_cpus"] == ",".join(map(str, quick["server_cpus"]))
    assert panel.run_button.description == "Run"


def test_set_then_values_round_trip(panel):
    panel.set(models=["select"], clients=[3, 6, 10], requests=4, repeats=2, k=3,
              server_cpus=[0], client_cpus="1")
    assert panel.values() == {"models": ["select"], "clients": [3, 6, 10], "requests": 4, "repeats": 2,
                              "profile_stacks": False,
                              "k": 3, "server_cpus": "0", "client_cpus": "1", "placement": ["same_host"],
                              "link_rate": None, "link_delay_ms": [0], "link_loss_percent": 0.0,
                              "link_jitter_ms": 0, "link_mtu": 1500}
    panel.set(placement=["same_host", "namespaces"], link_rate="1gbit", link_delay_ms=[0, 5, 20], link_loss_percent=1)
    assert {name: panel.values()[name] for name in ("placement", "link_rate", "link_delay_ms", "link_loss_percent")} \
        == {"placement": ["same_host", "namespaces"], "link_rate": "1gbit", "link_delay_ms": [0, 5, 20],
            "link_loss_percent": 1.0}
    with pytest.raises(LabError):
        panel.set(threads=4)


def test_run_button_measures_into_the_given_results_file(panel, tmp_path):
    cpus = psutil.Process().cpu_affinity()
    panel.set(models=["select"], clients=[2], requests=2, repeats=1, k=2,
              server_cpus=[cpus[0]], client_cpus=[cpus[-1]])
    assert "1 point to measure: about 0 s to 1 s on this machine (nothing of this experiment measured here yet: " \
        "a bound from its requests" in panel.estimate_line.value
    panel.run_button.click()
    assert panel.last_error is None, panel.last_error
    df = panel.df
    assert len(df) == 1 and df["status"].iloc[0] == "ok", df.get("error")
    assert df["requests_ok"].iloc[0] == 2 * 2
    assert (panel.progress.value, panel.progress.max) == (1, 1)
    assert panel.status_text == "done: 1 points"
    assert isinstance(panel.figure, go.Figure)
    assert [t.name for t in panel.figure.data] == ["select"]
    assert panel.plan["clients"] == [2] and panel.plan.profile == "quick"
    rows = [json.loads(line) for line in (tmp_path / "proc_top.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["model"] == "select"
    # after the run: nothing left to measure, and another point takes as long as that one did
    assert "every point is already measured" in panel.estimate_line.value
    panel.set(clients=[2, 3])
    took = rows[0]["point_wall_s"]
    assert f"1 point to measure: about {took:.0f} s on this machine" in panel.estimate_line.value

    panel.plot_choice.value = "server_context-switches"
    assert panel.figure.layout.yaxis.title.text == "server context switches"


def test_a_target_repeats_each_point_and_the_panel_says_what_was_reached(panel, tmp_path):
    cpus = psutil.Process().cpu_affinity()
    panel.set(models=["select"], clients=[2], requests=2, repeats=1, k=2, server_cpus=[cpus[0]], client_cpus=[cpus[-1]])
    panel.plot_choice.value = "server_context-switches"
    panel.target.value, panel.most.value = 50, 6  # at most 6 repeats, whatever the spread
    panel.run_button.click()
    assert panel.last_error is None, panel.last_error
    assert len(panel.df) == 6 and sorted(panel.df["repeat"]) == list(range(6))
    assert panel.target_line.value.startswith("<span style='color:#444'>target: the median of server_context-switches "
                                              "to ±50% at 95%: reached at ")
    assert "of 1 point(s)" in panel.target_line.value
    # the status line says the run's end, as an alert a screen reader speaks when it appears
    assert panel.status_text == "done: 6 points"
    assert panel.status.value == "<span role='alert'>done: 6 points</span>"


def test_bad_fields_show_what_and_fix_without_running(panel, tmp_path):
    panel.set(models=[])
    assert panel.run() is None
    assert "no server model" in panel.last_error.what
    assert "choose one or more" in panel.last_error.fix
    assert panel.progress.bar_style == "danger"

    panel.set(models=["select"], server_cpus="zero")
    assert panel.run() is None
    assert "server_cpus" in panel.last_error.what
    assert not (tmp_path / "proc_top.jsonl").exists()


def test_error_html_has_what_fix_and_compiler_output():
    page = friendly.error_html(LabError("port 80 is busy", "use port 0"))
    assert "port 80 is busy" in page and "What to do:</b> use port 0" in page
    assert "Traceback" not in page
    page = friendly.error_html(BuildError("the C build failed", "select.c:3: error: expected ';' <here>",
                                         "fix the first error"))
    assert "<pre" in page and "select.c:3: error: expected &#x27;;&#x27; &lt;here&gt;" in page


def test_c_function_reads_the_current_source():
    first, last, text = csource.c_function("servers/threaded.c", "serve")
    lines = (paths.CSRC / "servers" / "threaded.c").read_text().splitlines()
    assert text.splitlines() == lines[first - 1:last]
    assert text.startswith("static int serve(") and text.endswith("}")
    assert "pthread_create" in text
    with pytest.raises(LabError) as err:
        csource.c_function("servers/threaded.c", "no_such_function")
    assert "no function no_such_function()" in err.value.what


def test_friendly_errors_show_what_and_fix_and_still_fail_the_cell(capsys):
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        friendly.friendly_errors()
        result = shell.run_cell("from labkit.errors import LabError\n"
                                "raise LabError('the port is busy', 'use port 0')")
        assert isinstance(result.error_in_exec, LabError) and not result.success
        printed = capsys.readouterr().out
        assert "Traceback" not in printed
    finally:
        shell.set_custom_exc((), None)
        InteractiveShell.clear_instance()


@pytest.mark.parametrize("experiment", ["echo_scale", "idle_conns"])
def test_panel_fields_follow_any_experiments_parameters(experiment, built_bin):
    params = experiments.resolve(experiment, "quick")
    panel = ControlPanel(params)
    expected = tuple(p.name for p in experiments.get(experiment).parameters if p.name not in ("service", "engine"))
    assert tuple(panel.fields) == expected == tuple(p.name for p in experiments.get(experiment).fields)
    values = panel.values()
    # What the panel reads back resolves to the same parameters it started from.
    again = experiments.resolve(experiment, "quick", **values)
    assert sorted(again["models"]) == sorted(params["models"])  # the panel lists models in build order
    assert {name: again[name] for name in expected[1:]} == {name: params[name] for name in expected[1:]}
    if experiment == "echo_scale":
        assert values["workers"] is None  # empty field: the server's default
        panel.set(exchanges=[5, 7], workers=2)
        assert panel.values()["exchanges"] == [5, 7] and panel.values()["workers"] == "2"
    else:
        panel.set(idle=[0, 10], warmup="0.1s", rate=100.0)
        assert (panel.values()["idle"], panel.values()["warmup"], panel.values()["rate"]) == ([0, 10], "0.1s", 100.0)
    with pytest.raises(LabError):
        panel.set(service="top")


@pytest.mark.parametrize("experiment", sorted(experiments.catalogue()))
def test_every_experiments_panel_reads_back_what_it_was_given(experiment, built_bin):
    """Each parameter kind's widget shows a value and reads it back so that it resolves
    to the same parameters (sizes with units, buffer shapes, lists of choices...)."""
    params = experiments.resolve(experiment, "quick")
    panel = ControlPanel(params)
    again = experiments.resolve(experiment, "quick", **panel.values())
    for param in experiments.get(experiment).fields:
        mine, theirs = again[param.name], params[param.name]
        if param.name == "models":
            mine, theirs = sorted(mine), sorted(theirs)  # the panel lists models in build order
        assert mine == theirs, param.name


def test_a_rejected_value_is_explained_under_its_field_and_nothing_runs(panel):
    panel.set(clients=[0, 5])
    message = panel.messages["clients"].value
    assert "client count 0 is below 1" in message and "use 1 or more clients" in message
    assert panel.messages["requests"].value == ""
    assert panel.run() is None and "client count 0 is below 1" in panel.last_error.what
    assert panel.status_text == "stopped: see the message below" and panel.df is None
    panel.set(clients=[3])
    assert panel.messages["clients"].value == ""  # fixed: the message goes


def test_list_fields_are_text_boxes_that_take_any_number_to_check(panel):
    field = panel.fields["clients"]
    # a plain text box, always visible (ipywidgets' tag field hid its own once it held tags)
    assert isinstance(field, widgets.Text) and field.placeholder == "e.g. 10, 50, 100"
    field.value = "10, 0"  # the browser would drop a 0 silently; the kind says why instead
    assert "0 is below 1" in panel.messages["clients"].value
    field.value = "10 50,100"
    assert panel.messages["clients"].value == "" and panel.values()["clients"] == [10, 50, 100]
    field.value = "10, ten"
    assert "ten" in panel.messages["clients"].value


def test_error_commands_set_as_code():
    """An error message sets its commands as code not as literal backticks."""
    page = friendly.error_html(LabError("the `ip` command failed", "run `make build`, then <retry>"))
    assert "<code>ip</code>" in page and "<code>make build</code>" in page
    assert "`" not in page and "&lt;retry&gt;" in page


def test_a_help_line_shows_code_as_code_not_backticks():
    from labkit import panel

    assert panel.help_html("every body is `size`; 1 < 2") == "every body is <code>size</code>; 1 &lt; 2"


def test_a_failed_points_reason_is_said_under_the_panel_in_its_own_words(panel, monkeypatch):
    """The figure's crosses give a failed point's reason on hover only: the panel says each
    reason once, in the words the sweep recorded, with the points that gave it."""
    import pandas as pd

    from labkit import panel as panel_module

    said = "the server closed the connection after 3 of 8 replies (ECONNRESET)"

    def sweep_run(plan, results=None, progress=None, **options):
        rows = [{"model": model, "clients": clients, "repeat": 0, "status": "ok" if model == "select" else "failed",
                 "error": "" if model == "select" else said, "requests_ok": 4}
                for model in ("select", "epoll") for clients in (2, 4)]
        frame = pd.DataFrame(rows)
        frame.attrs["experiment"] = panel.experiment
        return frame

    monkeypatch.setattr(panel_module.sweep, "run", sweep_run)
    for drawn in ("_refresh_figure", "_refresh_table"):  # tested on measured rows above
        monkeypatch.setattr(panel, drawn, lambda: None)
    panel.set(models=["select", "epoll"], clients=[2, 4])
    panel.run_button.click()
    assert panel.status_text == "done: 4 points, 2 failed"
    shown = "".join(output["data"]["text/html"] for output in panel.errors.outputs)
    assert shown.count(html.escape(said)) == 1, shown
    assert "2 failed (epoll, concurrent clients 2; epoll, concurrent clients 4)" in shown, shown


def test_panel_says_sweep_once(panel, monkeypatch, capsys):
    """The sweep's sentences (its estimate, CPUs shared with another lab run) stay inside the
    panel: the estimate is the line above Run, refreshed after the Run; nothing is left under
    the panel's results saying "8 points to measure; nothing ... measured yet"."""
    import pandas as pd

    from labkit import panel as panel_module
    from labkit.friendly import say

    estimate = panel_module._estimate_text(panel.plan, panel.results)
    assert "to measure" in estimate, estimate
    shared = "CPU 1 is also leased by another lab run on this machine: this sweep shares them"

    def sweep_run(plan, results=None, progress=None, **options):
        say(panel_module._estimate_text(plan, results))  # as sweep.run says it before it measures
        say(f"note: {shared}")
        frame = pd.DataFrame([{"model": "select", "clients": 2, "repeat": 0, "status": "ok", "error": "",
                               "requests_ok": 4}])
        frame.attrs["experiment"] = panel.experiment
        return frame

    monkeypatch.setattr(panel_module.sweep, "run", sweep_run)
    for drawn in ("_refresh_figure", "_refresh_table"):
        monkeypatch.setattr(panel, drawn, lambda: None)
    panel.run_button.click()
    said = [output["data"]["text/plain"] for output in panel.said.outputs]
    assert said == [f"note: {shared}"], said
    assert estimate not in capsys.readouterr().out  # nothing of the Run printed outside the panel
