"""The seed tables: transcribed exactly, internally consistent, readable by labkit.seeds; and your
results set beside them (labkit.seeds.compare)."""

import math
import os
from pathlib import Path

import pandas as pd
import pytest

from labkit import figure_lint, paths, seeds
from labkit.errors import LabError
from test_plots import of_experiment, synthetic, uploads_rows  # results shaped like the sweep's

MODELS_000 = ["iterative", "threaded", "select"]
METRICS_000 = ["task-clock", "cpus-utilized", "page-faults", "cycles", "instructions",
               "branch-misses", "branch-miss-rate", "elapsed_s"]

# The original reports live beside LAB.md (not in this repository).
REPORTS = Path(os.environ.get("LABKIT_SEED_REPORTS", paths.ROOT.parent / "shared" / "seeds"))


def _report(prefix: str) -> str:
    found = sorted(REPORTS.glob(f"{prefix}_*.txt"))
    if not found:
        pytest.skip(f"seed report {prefix} not found under {REPORTS} (set LABKIT_SEED_REPORTS)")
    return found[0].read_text()


def _tab_rows(text: str, fields: int) -> list[list[str]]:
    """Lines of a tab-separated table with `fields` cells whose first cell is a client count."""
    rows = [line.strip().split("\t") for line in text.splitlines() if "\t" in line]
    return [r for r in rows if len(r) == fields and r[0].isdigit()]


def test_000_matches_the_reports_per_model_tables():
    rows = _tab_rows(_report("000"), 9)
    assert len(rows) == 9, "expected three 3-row summary tables (single, multi, select)"
    t = seeds.table("000")
    for i, row in enumerate(rows):
        model = MODELS_000[i // 3]
        clients = int(row[0])
        for metric, printed in zip(METRICS_000, row[1:]):
            cell = t[(t.model == model) & (t.clients == clients) & (t.metric == metric)]
            assert len(cell) == 1, (model, clients, metric)
            assert cell["printed"].iloc[0] == printed
            assert cell["value"].iloc[0] == float(printed.replace(",", ""))


def test_000_matches_the_reports_per_metric_comparison_tables():
    rows = _tab_rows(_report("000"), 4)
    assert len(rows) == 8 * 3, "expected eight 3-row comparison tables"
    t = seeds.table("000")
    for i, row in enumerate(rows):
        metric = METRICS_000[i // 3]
        for model, printed in zip(MODELS_000, row[1:]):
            cell = t[(t.model == model) & (t.clients == int(row[0])) & (t.metric == metric)]
            # The comparison tables print "1.14" where the summary table has "1.140".
            assert cell["value"].iloc[0] == pytest.approx(float(printed.replace(",", "")))


def test_001_matches_the_reports_tables():
    rows = _tab_rows(_report("001"), 3)
    assert len(rows) == 9
    t = seeds.table("001")
    for i, row in enumerate(rows):
        metric = ["cycles", "instructions", "context-switches"][i // 3]
        for model, printed in zip(["threaded", "select"], row[1:]):
            cell = t[(t.model == model) & (t.clients == int(row[0])) & (t.metric == metric)]
            assert cell["printed"].iloc[0] == printed
            assert cell["value"].iloc[0] == float(printed.replace(",", ""))


def test_000_is_complete():
    """000 is complete and its cpu utilization is task clock over elapsed."""
    t = seeds.table("000")
    assert set(t["side"]) == {"client"}
    assert len(t) == 3 * 3 * len(METRICS_000)
    tc = seeds.wide("000", "task-clock")
    el = seeds.wide("000", "elapsed_s")
    util = seeds.wide("000", "cpus-utilized")
    # perf's "CPUs utilized" is task-clock / wall time; rounding in the report stays within 6%.
    ratio = (tc / 1000.0 / el) / util
    assert ((ratio > 0.94) & (ratio < 1.06)).all().all(), ratio


def test_001_is_server_side_threaded_and_select_at_3_6_10():
    t = seeds.table("001")
    assert seeds.side("001") == "server"
    assert sorted(t["clients"].unique()) == [3, 6, 10]
    assert set(t["model"]) == {"threaded", "select"}
    wide = seeds.wide("001", "context-switches")
    assert wide.loc[10, "threaded"] == 50 and wide.loc[10, "select"] == 31


def test_tables_and_describe():
    all_tables = seeds.tables()
    assert set(all_tables) == {"000", "001", "002", "003", "004"}  # 002: uploads (03), 003: echo (02), 004: writes (04)
    for name, df in all_tables.items():
        assert isinstance(df, pd.DataFrame) and not df.empty
        assert (df["seed"] == name).all()
        # a value is missing only where the report printed none ("<1 ms"), and then says so
        missing = df[df["value"].isna()]
        assert missing["printed"].str.startswith("<").all(), missing
    assert "CLIENT" in seeds.describe("000") and "SERVER" in seeds.describe("001")
    assert seeds.describe(1) == seeds.describe("001")


def test_unknown_seed_and_metric_say_what_to_use():
    with pytest.raises(LabError) as err:
        seeds.table("007")
    assert "000" in err.value.fix
    with pytest.raises(LabError) as err:
        seeds.wide("001", "page-faults")
    assert "context-switches" in err.value.fix


# -- your results beside the seeds' (labkit.seeds.compare), on rows shaped like the sweep's


def test_seed_comparison_puts_the_seed_beside_your_numbers():
    seed = seeds.table("001")
    fig = seeds.comparison(synthetic(), seed, "context-switches")
    titles = [a.text for a in fig.layout.annotations]
    assert "your machine (server side)" in titles
    assert "seed 001 (server side, their machine)" in titles
    right = [t for t in fig.data if t.xaxis == "x2"]
    threaded = next(t for t in right if t.name == "threaded")
    assert list(threaded.y) == [4, 26, 50]
    left = {t.name: t for t in fig.data if t.xaxis == "x"}
    assert list(left["threaded"].y) == [2 * c * 2 for c in (3, 6, 10)]
    assert fig.layout.yaxis.title.text and fig.layout.yaxis2.title.text == fig.layout.yaxis.title.text
    # yours with the interval every figure draws (3 repeats: [min, max], the median's 75% one), the seed's
    # printed without one, and both said where the reader looks
    assert list(left["threaded"].error_y.array) == [2 * c * 3 - 2 * c * 2 for c in (3, 6, 10)]
    assert left["threaded"].customdata[0][0] == "75% interval of the median of 3 runs"
    assert "no interval: the report gives none" in threaded.hovertemplate
    assert figure_lint.problems(fig) == []


def test_seed_comparison_of_an_unmeasurable_metric_shows_only_the_seed():
    fig = seeds.comparison(synthetic(hardware=False), seeds.table("000"), "cycles")
    assert all(t.xaxis == "x2" for t in fig.data)
    assert any("not measurable on this machine" in a.text.replace("<br>", " ") for a in fig.layout.annotations)


def test_seed_times_table_puts_seed_002_beside_your_medians_in_ms():
    table = seeds.times_table(uploads_rows(), seeds.table("002"))
    row = table.loc[("100", "10MB")]
    assert row[("seed 002 (ms)", "aio")] == pytest.approx(571.0)
    assert row[("yours (ms)", "aio")] == pytest.approx(100 * (10 << 20) / 1e9 * 1000)
    # rows with no number on either side are dropped; a "<1 ms" in the seed stays blank, not 0
    assert not table.isna().all(axis=1).any()
    assert math.isnan(table.loc[("1", "1KB"), ("seed 002 (ms)", "busypoll")])


def repeated_uploads(seconds_by_model: dict) -> pd.DataFrame:
    """One 10 MB upload point on one connection, repeated: {model: [server_batch_s of each repeat]}."""
    rows = [dict(model=model, clients=1, size=10 << 20, status="ok", experiment="uploads", placement="same_host",
                 link="loopback", server_batch_s=value, repeat=i)
            for model, values in seconds_by_model.items() for i, value in enumerate(values)]
    return of_experiment(pd.DataFrame(rows), "uploads")


def test_your_medians_carry_intervals():
    """Three repeats: the median's interval is [min, max] (75%); one run has none, and the
    seed printed one number, so has none either."""
    table = seeds.times_table(repeated_uploads({"aio": [0.004, 0.005, 0.0045], "select": [0.006]}),
                              seeds.table("002"))
    key, low, high = ("1", "10MB"), table.attrs["low"], table.attrs["high"]
    assert table.loc[key, ("yours (ms)", "aio")] == pytest.approx(4.5)
    assert (low.loc[key, ("yours (ms)", "aio")], high.loc[key, ("yours (ms)", "aio")]) == pytest.approx((4.0, 5.0))
    assert low.loc[key, ("yours (ms)", "select")] == high.loc[key, ("yours (ms)", "select")] == pytest.approx(6.0)
    assert math.isnan(low.loc[key, ("seed 002 (ms)", "aio")])
    assert table.attrs["intervals"] == ["75% interval of the median of 3 runs"]
    html = seeds.styled(table).to_html()
    assert "4.5<br><small>(4.0 - 5.0)</small>" in html and "6.0<br>" not in html
    assert "server's time for the batch (ms)" in html and "(s)" not in html  # the unit the table is in
    assert "under each of yours, in brackets: 75% interval of the median of 3 runs" in html
    goodput = repeated_uploads({"aio": [0.004]}).assign(goodput_gbit_s=21.0)
    assert seeds.beside(goodput, seeds.table("002"), "goodput_gbit_s", index=("clients", "size"), unit="Gbit/s",
                        ).attrs["caption"].startswith("goodput (Gbit/s): seed 002")  # its unit said once
    once = seeds.styled(seeds.times_table(repeated_uploads({"aio": [0.004]}), seeds.table("002"))).to_html()
    assert "one run per point of yours, so no interval" in once and "<small>" not in once


def test_the_seed_003_table_writes_the_interval_of_your_median_after_it():
    rows = [dict(model="epoll", clients=5000, exchanges=200, status="ok", lat_p50_us=p50, lost_connections=0,
                 repeat=i, error="") for i, p50 in enumerate((2000.0, 2600.0, 2200.0))]
    table = seeds.observations_table(pd.DataFrame(rows), seeds.table("003"))
    assert table.loc[("5,000 clients / 200 exchanges", "yours: p50 response time (s)"), "epoll"] == \
        "0.0022 (0.002 - 0.0026)"
    assert "in brackets after each of your response times: 75% interval of the median of 3 runs" in \
        table.attrs["note"]


def test_seed_placements_table_puts_the_seeds_hosts_beside_your_links():
    rows = [dict(model="aio", clients=1, size=10 << 20, status="ok", experiment="uploads", placement=placement,
                 link=link, server_batch_s=seconds)
            for placement, link, seconds in (("same_host", "loopback", 0.004), ("namespaces", "tbf 1gbit", 0.086),
                                             ("namespaces", "tbf 1gbit", 0.090),
                                             ("namespaces", "tbf 1gbit, delay line 5ms", 0.16))]
    table = seeds.placements_table(of_experiment(pd.DataFrame(rows), "uploads"), seeds.table("002"), "aio")
    assert list(table.index) == [("1", "10MB")]  # only what you measured: the seed's other rows compare nothing
    row = table.loc[("1", "10MB")]
    assert row[("seed 002 (ms)", "different_hosts")] == pytest.approx(98.0)
    assert row[("seed 002 (ms)", "same_host")] == pytest.approx(5.0)
    assert row[("yours (ms)", "tbf 1gbit")] == pytest.approx(88.0)  # the median of two
    assert row[("yours (ms)", "loopback")] == pytest.approx(4.0)


def test_seed_003_table_shared_points():
    """The seed 003 table compares only shared points and writes failed not nan."""
    rows = [dict(model=m, clients=c, exchanges=e, status="failed" if (m, c) == ("select", 10000) else "ok",
                 lat_p50_us=2000.0, lost_connections=7 if m == "select" else 0, repeat=0, error="")
            for m in ("threaded", "select", "epoll", "epoll_workers")
            for c, e in ((5000, 200), (10000, 200), (500, 20))]
    table = seeds.observations_table(pd.DataFrame(rows), seeds.table("003"))
    points = list(dict.fromkeys(table.index.get_level_values(0)))
    assert points == ["5,000 clients / 200 exchanges", "10,000 clients / 200 exchanges"]  # shared ones only
    assert table.loc[("10,000 clients / 200 exchanges", "yours: p50 response time (s)"), "select"] == "failed"
    assert table.loc[("5,000 clients / 200 exchanges", "yours: lost connections"), "select"] == "7"
    assert table.loc[("5,000 clients / 200 exchanges", "seed 003: response time (s)"), "epoll"] == "0.008002"
    # a model the seed did not have: a dash on its side, yours beside it
    assert table.loc[("5,000 clients / 200 exchanges", "seed 003: response time (s)"), "epoll_workers"] == "—"
    assert table.loc[("5,000 clients / 200 exchanges", "yours: p50 response time (s)"), "epoll_workers"] == "0.002"
    assert "not measured by you: 5,000 x 300, 10,000 x 300" in table.attrs["note"]
    assert "not in seed 003: 500 x 20" in table.attrs["note"]
    assert not table.isna().any().any()
