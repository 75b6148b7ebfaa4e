"""An experiment is one declaration file.

The registry, resolving and the grid; then a test's own experiment, declared
in tests/experiments/echo_sizes.py alone (no edit to labkit), run through
`labkit sweep`, the control panel and the plots; and the median table of a
real idle_conns sweep, one row per model x idle count."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from labkit import experiments, paths, plots
from labkit.errors import LabError
from labkit.experiments import Experiment
from labkit.params import Int, IntList, Models, Param, cpu_params, repeats_param

pytestmark = pytest.mark.timeout(240)

EXTRA = Path(__file__).parents[1] / "experiments"  # tests/experiments/
CPUS = sorted(os.sched_getaffinity(0))
PINS = ["--set", f"server_cpus={CPUS[0]}", "--set", f"client_cpus={CPUS[-1]}"]


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setenv(experiments.EXTRA_DIRS_ENV, str(EXTRA))
    return experiments.get("echo_sizes")


def labkit(*args, extra=True, timeout=180):
    env = {**os.environ, "PYTHONPATH": str(paths.ROOT)}
    if extra:
        env[experiments.EXTRA_DIRS_ENV] = str(EXTRA)
    return subprocess.run([sys.executable, "-m", "labkit", *args], cwd=paths.ROOT, capture_output=True, text=True,
                          timeout=timeout, env=env)


def table_rows(stdout: str, columns: int) -> list[list[str]]:
    """The rows of the median table `labkit sweep` prints: the first `columns` words of
    each line after its two header lines (grid point labels, every level printed)."""
    lines = stdout.split("per point:\n", 1)[1].splitlines()
    body = [line for line in lines[2:] if line.strip() and not line.startswith(" ") and "rows in" not in line]
    return [line.split()[:columns] for line in body]


# --- the registry and the declaration ------------------------------------------------


def test_the_registry_finds_every_experiment_file_and_only_those(monkeypatch):
    monkeypatch.delenv(experiments.EXTRA_DIRS_ENV, raising=False)
    files = {path.stem for path in (paths.ROOT / "labkit" / "experiments").glob("[!_]*.py")}
    assert set(experiments.catalogue()) == files == {"proc_top", "echo_scale", "idle_conns", "uploads",
                                                     "write_strategies", "nagle", "bdp", "offered_load",
                                                     "slow_clients", "accept_queue", "herd", "conn_memory",
                                                     "service_time"}
    with pytest.raises(LabError) as caught:
        experiments.get("echo_sizes")
    assert "proc_top" in caught.value.fix


def test_a_declaration_that_cannot_work_is_refused_when_it_is_written():
    parts = (Param("models", Models(), ["select"]), Param("clients", IntList(), [1]), repeats_param(),
             *cpu_params())
    with pytest.raises(ValueError, match="no parameter 'size' for the x axis"):
        Experiment("broken", "broken", parts, x="size")
    with pytest.raises(ValueError, match="no 'repeats' parameter"):
        Experiment("broken", "broken", parts[:2] + parts[3:], x="clients")
    with pytest.raises(ValueError, match="profile 'quick' names no parameter 'sizes'"):
        Experiment("broken", "broken", parts, x="clients", profiles={"quick": {"sizes": [1]}})
    with pytest.raises(ValueError, match="to='nowhere'"):
        Param("size", Int(), 1, to="nowhere")


def test_a_test_experiment_becomes_points_server_flags_and_loadgen_flags(toy):
    points = toy.resolve("quick").grid()
    assert [(p["model"], p["size"], p["clients"]) for p in points] == [
        ("select", 16, 3), ("select", 4096, 3), ("epoll_workers", 16, 3), ("epoll_workers", 4096, 3)]
    assert toy.server_spec(points[2]).argv(0)[1:] == ["--port", "0", "--service", "echo", "--workers", "1"]
    argv = toy.load_spec(points[1]).argv(7000)
    flags = dict(zip(argv[1::2], argv[2::2]))
    assert flags["--requests"] == "20" and flags["--size"] == "4096" and flags["--connect-timeout"] == "3"
    assert flags["--clients"] == "3" and flags["--engine"] == "events" and flags["--service"] == "echo"


def test_a_plan_carries_its_experiment_its_values_and_its_runs(toy):
    plan = experiments.resolve(toy, "quick", size=[16])  # the Experiment itself, or its name
    assert plan.experiment is toy and plan.profile == "quick" and plan["size"] == [16]
    assert plan["server_cpus"] == plan.pinning.server_cpus and plan.pinning_note == plan.pinning.note
    assert plan.describe().startswith("echo_sizes (profile quick): models select, epoll_workers; message size")
    wider = plan.with_values(size=[16, 64])  # a second plan from the first: the other values kept
    assert (wider["size"], wider["clients"], wider.profile) == ([16, 64], plan["clients"], "quick")
    runs = plan.with_values(repeats=2).points()
    assert [(run.point["model"], run.repeat) for run in runs] == [
        ("select", 0), ("select", 1), ("epoll_workers", 0), ("epoll_workers", 1)]
    first = runs[0]
    assert (first.server.model, first.load.options["size"], first.pinning) == ("select", 16, plan.pinning)
    assert (first.link, first.events, first.stacks) == (None, None, False)
    assert len({run.key for run in runs}) == 4


def test_every_axis_is_in_the_grid_in_declared_order():
    idle = experiments.get("idle_conns")
    assert idle.axis_columns == ["model", "idle", "clients", "arrivals", "placement", "link_delay_ms"]
    assert experiments.get("echo_scale").axis_columns == ["model", "clients", "exchanges", "placement",
                                                          "link_delay_ms"]
    points = idle.resolve("quick").grid()
    assert [(p["model"], p["idle"]) for p in points][:2] == [("select", 0), ("select", 1000)]


def test_a_same_host_point_has_no_link_so_link_delays_do_not_multiply_it():
    echo = experiments.get("echo_scale")
    plan = echo.resolve("quick", models=["epoll"], clients=[10], exchanges=[5], placement="same_host,namespaces",
                        link_rate="1gbit", link_delay_ms=[0, 5, 20], link_loss_percent=1)
    placed = [(p["placement"], p["link_rate"], p["link_delay_ms"], p["link_loss_percent"]) for p in plan.grid()]
    assert placed == [("same_host", None, 0, 0.0), ("namespaces", "1gbit", 0, 1.0), ("namespaces", "1gbit", 5, 1.0),
                      ("namespaces", "1gbit", 20, 1.0)]
    link = echo.link(plan.grid()[2])
    assert (link.rate, link.delay_ms, link.loss_percent) == ("1gbit", 5, 1.0)
    assert echo.link(plan.grid()[0]) is None
    assert [run.link is None for run in plan.points()] == [True, False, False, False]


@pytest.mark.parametrize("given, says", [(dict(link_delay_ms=[20001]), "link delay 20001 is above 10000"),
                                         (dict(link_delay_ms=[-5]), "link delay -5 is below 0"),
                                         (dict(link_loss_percent=101), "link_loss_percent 101 is outside 0 to 100"),
                                         (dict(link_loss_percent="lots"), "link_loss_percent must be a number"),
                                         (dict(placement="namespaces", link_delay_ms=[5, 20], link_jitter_ms=10),
                                          "jitter_ms 10 is more than delay_ms 5"),
                                         (dict(placement="namespaces", link_mtu=70000), "mtu 70000 is outside")])
def test_impossible_link_delays_and_losses_are_refused_with_the_range(given, says):
    with pytest.raises(LabError) as refused:
        experiments.resolve("echo_scale", "quick", **given)
    assert says in refused.value.what and refused.value.fix


# --- the test experiment through the CLI, the panel and the plots --------------------


def test_labkit_experiments_lists():
    """Labkit experiments lists every experiment in a line and one with its parameters."""
    done = labkit("experiments")
    assert done.returncode == 0, done.stderr
    names = ("accept_queue", "bdp", "conn_memory", "echo_scale", "echo_sizes", "herd", "idle_conns", "nagle",
             "offered_load", "proc_top", "service_time", "slow_clients", "uploads", "write_strategies")
    assert sorted(line.split()[0] for line in done.stdout.splitlines()[:len(names)]) == list(names)
    assert "--set" not in done.stdout and "labkit experiments NAME" in done.stdout
    one = labkit("experiments", "echo_sizes")
    assert one.returncode == 0, one.stderr
    assert "--set connect_timeout=" in one.stdout and "default 16,4096" in one.stdout
    idle = labkit("experiments", "idle_conns").stdout
    assert "--set idle=" in idle and "(quick: 0,1000)" in idle
    strategies = labkit("experiments", "write_strategies").stdout
    # defaults as they are typed back: sizes and shapes in their units, flags on/off, no raw bytes
    assert "default 15x100,30x50,60x25,100x15" in strategies and "default 20000 (quick: 2000)" in strategies
    assert "17179869184" not in labkit("experiments", "uploads").stdout and "False" not in strategies
    unknown = labkit("experiments", "nosuch")
    assert unknown.returncode == 2 and "choose one of: accept_queue, bdp" in unknown.stderr


def test_a_test_experiment_runs_through_labkit_sweep(tmp_path, built_bin):
    results = tmp_path / "sizes.jsonl"
    done = labkit("sweep", "echo_sizes", "--profile", "quick", "--set", "size=16,4096", "--set", "repeats=1",
                  "--results", str(results), *PINS)
    assert done.returncode == 0, done.stderr
    assert sorted(map(tuple, table_rows(done.stdout, 5))) == sorted(
        (model, size, "3", "1", "0") for model in ("epoll_workers", "select") for size in ("16", "4096"))
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert len(rows) == 4 and {row["status"] for row in rows} == {"ok"}
    for row in rows:
        assert row["requests_ok"] == 3 * 20  # 3 connections x 20 exchanges
        assert row["exchanges"] == row["requests"] == 20 and row["connect-timeout"] == 3
        assert row["experiment"] == "echo_sizes" and row["size"] in (16, 4096)
    assert {row["workers"] for row in rows} == {1}


def test_a_test_experiment_runs_through_the_panel_and_the_plots(toy, tmp_path, built_bin):
    from labkit.panel import ControlPanel

    panel = ControlPanel(toy.resolve("quick"), results=tmp_path / "sizes.jsonl")
    assert tuple(panel.fields) == ("models", "size", "clients", "exchanges", "workers", "connect_timeout",
                                   "repeats", "server_cpus", "client_cpus")
    panel.set(models=["select"], size=[16, 1024], server_cpus=[CPUS[0]], client_cpus=[CPUS[-1]])
    df = panel.run()
    assert df is not None, panel.last_error
    assert list(df["status"]) == ["ok", "ok"] and sorted(df["size"]) == [16, 1024]
    figure = panel.figure
    assert figure.layout.xaxis.title.text == "message size (bytes)" and figure.layout.yaxis.type == "log"
    assert [trace.name for trace in figure.data] == ["select"] and list(figure.data[0].x) == [16, 1024]
    assert "clients 3" in figure.layout.title.subtitle.text  # the other axis, at its one value, under the title
    assert [option[1] for option in panel.plot_choice.options] == ["lat_p50_us", "throughput_rps"]
    panel.plot_choice.value = "throughput_rps"
    assert panel.figure.layout.yaxis.title.text == "throughput (requests/s)"
    table = plots.counters_table(df)
    # clients, at its one value, is said in the caption, not repeated on every row
    assert table.index.names == ["model", "size"] and len(table) == 2
    assert "(clients 3" in table.attrs["caption"]
    assert list(plots.failed_points(df).columns) == ["model", "size", "clients", "repeat", "error"]


# --- the CLI takes any parameter, and says what is wrong ------------------------------


@pytest.mark.parametrize("setting, says", [
    ("bogus=1", "idle_conns has no parameter bogus"),
    ("idle", "is not key=value"),
    ("idle=lots", "idle must be a whole number"),
    ("models=epoll,nosuch", "unknown server model 'nosuch'"),
    ("rate=-5", "rate must be above 0"),
    ("warmup=1.5", "warmup must be seconds"),
])
def test_sweep_set_refuses_bad_keys_and_values(setting, says, tmp_path):
    """Sweep set refuses an unknown key or a bad value with the valid ones."""
    done = labkit("sweep", "idle_conns", "--set", setting, "--results", str(tmp_path / "r.jsonl"), extra=False)
    assert done.returncode == 2 and says in done.stderr and "Traceback" not in done.stderr
    if "no parameter" in says or "key=value" in says:
        assert "clients" in done.stderr and "warmup" in done.stderr  # the keys it does take
    assert not (tmp_path / "r.jsonl").exists()


@pytest.mark.slow
def test_idle_conns_median_table(tmp_path, built_bin):
    """Idle conns quick median table has one row per model and idle count."""
    done = labkit("sweep", "idle_conns", "--profile", "quick", "--results", str(tmp_path / "idle.jsonl"), *PINS,
                  extra=False)
    assert done.returncode in (0, 1), done.stderr  # 1: select refuses 1,000 idle connections (FD_SETSIZE)
    rows = table_rows(done.stdout, 3)
    assert sorted((model, idle) for model, idle, _ in rows) == sorted(
        (model, idle) for model in ("select", "poll", "epoll") for idle in ("0", "1000"))
    assert {active for _, _, active in rows} == {"100"}
