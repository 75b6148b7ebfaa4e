"""Where the time goes (labkit.perf.stacks, labkit.flame): perf record's samples of a
server folded into stacks, from a recorded `perf script` output and from a live run; its
system calls counted by name; the flame charts and the table drawn from them; and the
reason, never an empty chart, where perf may not sample."""

import math
from pathlib import Path

import pandas as pd
import pytest

import measuring
from labkit import flame, perf
from labkit.errors import LabError
from labkit.perf import stacks

pytestmark = pytest.mark.measuring  # make test runs it alone (tests/conftest.py)

DATA = Path(__file__).parents[1] / "data" / "perf"  # tests/data/perf/
RECORDED = DATA / "script_epoll_echo.txt"
KPTR_RESTRICTED = DATA / "script_dd_kptr_restrict_1.txt"


def test_a_recorded_perf_script_folds_into_stacks_outermost_first():
    folded = perf.fold(RECORDED.read_text())
    assert sum(folded.values()) == 21  # 20 samples of epoll, one of threaded
    first = ("epoll;__libc_start_call_main;server_main;loop_serve;read;entry_SYSCALL_64_after_hwframe_[k];"
             "do_syscall_64_[k];ksys_read_[k];vfs_read_[k];rw_verify_area_[k]")
    assert folded[first] == 1
    assert folded["epoll;__libc_start_call_main;server_main;loop_serve;__GI___libc_write"] == 2
    # a frame perf could not name is "[unknown]" (or its program's name), a run of them one frame
    assert folded["threaded;[threaded];start_thread;[unknown];schedule_[k];finish_task_switch.isra.0_[k]"] == 1
    assert all(stack.split(";")[0] in ("epoll", "threaded") for stack in folded)


def test_many_stacks_are_trimmed_to_the_most_sampled_and_the_rest_summed():
    folded = {f"p;f{i}": i + 1 for i in range(stacks.MOST_STACKS + 50)}
    from collections import Counter

    kept = stacks._trimmed(Counter(folded))
    assert len(kept) == stacks.MOST_STACKS + 1 and sum(kept.values()) == sum(folded.values())
    assert kept[stacks.OTHER] == sum(range(1, 51))


def test_live_run_samples_stacks(built_bin):
    """A live run samples the servers stacks and counts its system calls."""
    row = measuring.point("epoll", clients=50, requests=400, service="echo", engine="events", stacks=True)
    assert row["status"] == "ok", row["error"]
    assert row["stacks_samples"] == sum(row["server_stacks"].values()) > 0, row["stacks_note"]
    assert any("loop_serve" in stack for stack in row["server_stacks"])  # the program's own frames
    if row["stacks_scope"] == "kernel and user stacks":
        assert any(stack.endswith("_[k]") for stack in row["server_stacks"])
    per_request = row["server_syscalls_per_request"]
    if per_request:  # where perf may count the tracepoints (root): one read and one write per echo
        assert per_request["write"] == pytest.approx(1.0, abs=0.01)
        assert 1.0 <= per_request["read"] <= 1.05  # and a few end-of-file reads
        assert "epoll_wait" in per_request and "select" not in per_request
    else:
        assert row["syscalls_note"]


def test_without_kernel_permission_the_stacks_are_user_only_and_say_so(built_bin, monkeypatch):
    monkeypatch.setattr(stacks.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(stacks, "read_paranoid", lambda: 2)
    # the top service: a /proc scan per request, user-space work enough to be sampled (an echo
    # server's time is nearly all in the kernel, so a short run may have no user sample at all)
    row = measuring.point("epoll", clients=8, requests=400, service="top", engine="events", stacks=True)
    assert row["stacks_scope"].startswith("user stacks only: perf_event_paranoid is 2")
    assert row["server_stacks"] and not any("_[k]" in stack for stack in row["server_stacks"])
    assert any("procstat_top" in stack for stack in row["server_stacks"])  # the server's own /proc scan


def test_where_perf_may_not_sample_the_reason_is_given_not_an_empty_chart(built_bin, monkeypatch):
    monkeypatch.setattr(stacks.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(stacks, "read_paranoid", lambda: 3)
    row = measuring.point("epoll", clients=5, requests=20, service="echo", stacks=True)
    assert row["status"] == "ok" and row["server_stacks"] == {} and row["stacks_samples"] == 0
    assert "perf_event_paranoid is 3" in row["stacks_note"]
    with pytest.raises(LabError) as refused:
        flame.side_by_side(pd.DataFrame([{**row, "model": "epoll"}]))
    assert "perf_event_paranoid is 3" in refused.value.what and "profile_stacks" in refused.value.fix


def test_a_flame_chart_has_a_box_per_call_path_as_wide_as_its_samples():
    folded = {"srv;main;loop;read;vfs_read_[k]": 3, "srv;main;loop;write;tcp_sendmsg_[k]": 5, "srv;main;loop": 2}
    fig = flame.chart(folded, "srv")
    trace = fig.data[0]
    boxes = dict(zip(trace.ids, trace.values))
    assert boxes["srv"] == boxes["srv;main"] == boxes["srv;main;loop"] == 10
    assert boxes["srv;main;loop;write"] == boxes["srv;main;loop;write;tcp_sendmsg_[k]"] == 5
    assert dict(zip(trace.ids, trace.parents))["srv;main;loop;read"] == "srv;main;loop"
    colors = dict(zip(trace.ids, trace.marker.colors))
    assert colors["srv"] == flame.ROOT and colors["srv;main"] == flame.USER
    assert colors["srv;main;loop;read;vfs_read_[k]"] == flame.KERNEL
    assert "vfs_read" in trace.labels and "10 samples" in fig.layout.title.text


def test_side_by_side_chart_per_model():
    """Side by side draws one chart per model and names the ones without."""
    rows = [dict(model=m, status="ok", throughput_rps=1000.0, requests_ok=100, stacks_samples=10,
                 stacks_scope="kernel and user stacks", stacks_note="",
                 server_stacks={f"{m};main;poll_[k]": 10} if m != "poll" else {},
                 server_syscalls_per_request={"read": 1.0, "write": 1.0, m: 0.5} if m != "poll" else {},
                 syscalls_note="" if m != "poll" else "not counted")
            for m in ("select", "poll", "epoll")]
    fig = flame.side_by_side(pd.DataFrame(rows))
    assert len(fig.data) == 2 and "no stacks for poll" in fig.layout.title.subtitle.text
    table = flame.syscalls_table(pd.DataFrame(rows))
    assert list(table.index) == ["select", "epoll"]
    assert table.loc["select", "select"] == 0.5 and table.loc["epoll", "select"] == 0.0
    assert math.isclose(table.loc["epoll", "read"], 1.0)


@pytest.mark.parametrize("paranoid, kptr, root, kernel, title", [
    (1, 0, False, True, "Where the server's time goes: kernel and user stacks"),
    (1, 1, False, False, "Where the server's time goes: user stacks only: the kernel's addresses are hidden "
                         "(kernel.kptr_restrict = 1)"),
    (2, 0, False, False, "Where the server's time goes: user stacks only: perf_event_paranoid is 2, so the "
                         "kernel's frames are not sampled"),
    (2, 1, True, True, "Where the server's time goes: kernel and user stacks"),  # root has CAP_SYSLOG
    (-1, 2, True, False, "Where the server's time goes: user stacks only: the kernel's addresses are hidden "
                         "(kernel.kptr_restrict = 2)"),
])
def test_the_charts_title_says_what_perf_could_sample_and_name(paranoid, kptr, root, kernel, title):
    sampled, scope = stacks.scope_for(paranoid, kptr, root)
    assert sampled is kernel
    said, lines = flame.title_for([scope])
    assert said == title
    assert ("orange: kernel" in lines[0]) is kernel and "per second of the server's CPU time" in lines[0]
    if not kernel:  # the fix, below the title
        assert "sudo sysctl" in lines[1]


def test_unnamed_kernel_frames():
    # `perf script` where the kernel's addresses are hidden from it (as --kallsyms of an empty file
    # gives): each kernel frame "[unknown]", in [kernel.kallsyms] or in no known object at all
    """Kernel frames perf could not name are kernel frames and the title says so."""
    script = ("epoll 1234/1234\n"
              "\tffffffff821ed4e6 [unknown] ([kernel.kallsyms])\n"
              "\tffffffff81000130 [unknown] ([unknown])\n"
              "\t           f8350 __GI___libc_write (/usr/lib/x86_64-linux-gnu/libc.so.6)\n\n")
    folded = perf.fold(script)
    assert dict(folded) == {"epoll;__GI___libc_write;" + stacks.UNNAMED_KERNEL: 1}  # a run of them is one
    scope = stacks.named_scope(stacks.KERNEL_AND_USER, folded)
    assert flame.title_for([scope])[0] == "Where the server's time goes: kernel and user stacks, the kernel's " \
                                          "frames unnamed"
    trace = flame.chart(folded, "epoll").data[0]
    assert dict(zip(trace.ids, trace.marker.colors))["epoll;__GI___libc_write;" + stacks.UNNAMED_KERNEL] \
        == flame.KERNEL  # orange, as the kernel's
    named = perf.fold(RECORDED.read_text())
    assert stacks.named_scope(stacks.KERNEL_AND_USER, named) == stacks.KERNEL_AND_USER


def test_kptr_restrict_1_for_a_user():
    """A users perf where kptr restrict is 1 samples the kernel but cannot name it."""
    folded = perf.fold(KPTR_RESTRICTED.read_text())  # a real run: the kernel's frames "[unknown] ([unknown])"
    assert sum(folded.values()) == 12
    assert folded["dd;__GI___libc_write;" + stacks.UNNAMED_KERNEL] == 3
    assert not any(frame.endswith("_[k]") and frame != stacks.UNNAMED_KERNEL
                   for stack in folded for frame in stack.split(";"))
    assert "the kernel's frames unnamed" in stacks.named_scope(stacks.KERNEL_AND_USER, folded)
    # what the sampler would have done there: user stacks only, and the title says why
    sampled, scope = stacks.scope_for(1, 1, root=False)
    assert not sampled and flame.title_for([scope])[0].endswith(
        "user stacks only: the kernel's addresses are hidden (kernel.kptr_restrict = 1)")
