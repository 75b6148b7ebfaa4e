"""labkit.instructor (checks, c_exercises): checks record what happened and never raise; the C
exercises compile a student's function in place of the lab's, accept the
lab's own code, reject a broken one with a helpful message, and show gcc's
own message for a compile error."""

import json
import re
import signal
import time

import pytest

from labkit import csource, paths
from labkit.exercises import shed_idle as c_exercise_shed, c_exercises, checks
from labkit.errors import BuildError, LabError


def lab_function(path: str, name: str) -> str:
    """The lab's own definition of `name` in csrc/`path` (what a perfect student writes)."""
    return csource.c_function(path, name)[2] + "\n"


# ---------------------------------------------------------------------------
# Checker


def records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_checks_record_passed_failed_and_error_and_never_raise(tmp_path, monkeypatch, capsys):
    checks_file = tmp_path / "checks.jsonl"
    monkeypatch.setenv(checks.CHECKS_FILE_ENV, str(checks_file))
    ex = checks.Checker(notebook="nb")

    @ex.check("good", points=2)
    def _():
        assert 1 + 1 == 2

    @ex.check("wrong", points=3)
    def _():
        assert False, "the ratio should be about 5: recompute it from df"

    @ex.check("broken", points=1, hidden=True)
    def _():
        {}["missing"]

    got = records(checks_file)
    assert [(r["check"], r["status"], r["points"], r["max_points"], r["hidden"]) for r in got] == [
        ("good", "passed", 2, 2, False), ("wrong", "failed", 0, 3, False), ("broken", "error", 0, 1, True)]
    # (pytest's assertion rewriting adds its own explanation after the message)
    assert got[1]["message"].startswith("the ratio should be about 5: recompute it from df")
    assert got[2]["message"].startswith("KeyError: 'missing'")
    assert set(got[0]) >= {"notebook", "check", "points", "max_points", "status", "message", "hidden"}
    printed = capsys.readouterr().out
    assert "PASS good: 2/2" in printed and "FAIL wrong: 0/3 -- the ratio should be about 5" in printed
    assert "ERROR broken (hidden)" in printed
    assert ex.summary() == "nb: 2/6 points from 3 checks; not passed yet: wrong, broken"


def test_without_the_checks_file_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.delenv(checks.CHECKS_FILE_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    checks.Checker("nb").check("x")(lambda: None)
    assert list(tmp_path.iterdir()) == []


def test_a_check_result_shows_as_html_in_a_notebook():
    result = checks.Checker("nb").run("wrong", lambda: (_ for _ in ()).throw(AssertionError("a < b")))
    assert "FAIL" in result._repr_html_() and "a &lt; b" in result._repr_html_()


def test_answer_is_recorded_not_scored(tmp_path, monkeypatch):
    """No length nor keyword scores a written answer: it is RECORDED for hand marking (0 points
    until then); the words it should touch on go to the marker, not into a verdict."""
    checks_file = tmp_path / "checks.jsonl"
    monkeypatch.setenv(checks.CHECKS_FILE_ENV, str(checks_file))
    ex = checks.Checker("nb")
    ex.answer("empty", "", min_words=5)
    ex.answer("no_keyword", "one two three four five six", min_words=5, keywords=["client"])
    fine = ex.answer("fine", "each client waits for the one before it", min_words=5, keywords=["Client"])
    got = {r["check"]: r for r in records(checks_file)}
    assert got["empty"]["status"] == "failed" and "at least 5 words" in got["empty"]["message"]
    assert got["no_keyword"]["status"] == checks.RECORDED and got["no_keyword"]["points"] == 0
    assert got["fine"]["status"] == checks.RECORDED and got["fine"]["answer"].startswith("each client")
    assert got["fine"]["look_for"] == ["Client"] and got["fine"]["max_points"] == 1
    assert "graded by hand" in fine.line() and "RECORDED" in fine._repr_html_()


def test_negative_points_are_refused():
    with pytest.raises(LabError, match="negative points"):
        checks.Checker("nb").check("x", points=-1)


# ---------------------------------------------------------------------------
# procstat_parse through cffi


NAIVE_CLOSE = ("for (const char *q = end; q > line; q--)", "for (const char *q = line + 1; q <= end; q++)")


def test_the_labs_own_procstat_parse_passes_every_check():
    code = lab_function("services/procstat.c", "procstat_parse")
    c_exercises.check_procstat_parse(code)
    c_exercises.check_procstat_live(code)


def test_a_parser_that_stops_at_the_first_paren_fails_with_a_hint():
    code = lab_function("services/procstat.c", "procstat_parse").replace(*NAIVE_CLOSE)
    assert code != lab_function("services/procstat.c", "procstat_parse")
    with pytest.raises(AssertionError, match=r"(?s)evil\) \(name x.*the LAST '\)'"):
        c_exercises.check_procstat_parse(code)


def test_a_stub_that_rejects_every_line_fails():
    stub = ("int procstat_parse(const char *line, size_t len, struct proc_cpu *out)\n"
            "{\n    (void)line; (void)len; (void)out;\n    return -1;\n}\n")
    with pytest.raises(AssertionError, match="yours gives None"):
        c_exercises.check_procstat_parse(stub)
    with pytest.raises(AssertionError, match="rejected a real line"):
        c_exercises.check_procstat_live(stub)


def test_an_endless_procstat_parse_is_stopped_by_the_cpu_time_it_used():
    endless = ("int procstat_parse(const char *line, size_t len, struct proc_cpu *out)\n"
               "{\n    (void)line; (void)len; (void)out;\n    for (volatile int i = 0; ; i++) { }\n}\n")
    with pytest.raises(AssertionError, match=r"did not return within 1 s of CPU time \(an endless loop\?"):
        c_exercises.parse_lines(endless, [c_exercises.stat_line(1, "init", 1, 2)], cpu_seconds=1)


def test_a_correct_parser_that_waits_longer_than_its_cpu_budget_passes():
    # Waiting, as on a machine whose CPUs are busy elsewhere (a test can stand still for 35 s),
    # costs no CPU time: two seconds asleep within a budget of one CPU-second pass.
    waits = lab_function("services/procstat.c", "procstat_parse").replace(
        "{", "{\n    sleep(2);", 1)
    line = c_exercises.stat_line(4321, "evil) (name x", 17, 5)
    started = time.monotonic()
    assert c_exercises.parse_lines(waits, [line], cpu_seconds=1) == [c_exercises.stat_entry(4321, "evil) (name x",
                                                                                             17, 5)]
    assert time.monotonic() - started >= 2


def test_a_procstat_compile_error_shows_gccs_message_naming_the_cell():
    code = lab_function("services/procstat.c", "procstat_parse").replace("return 0;", "return 0")
    with pytest.raises(BuildError) as failed:
        c_exercises.procstat_parse_module(code)
    assert re.search(r"your procstat_parse cell:\d+:\d+: error: expected ‘;’|"
                     r"your procstat_parse cell:\d+:\d+: error: expected ';'", failed.value.output)


# ---------------------------------------------------------------------------
# ev_poll's dispatch, in a scratch poll server


def test_the_labs_own_ev_poll_serves_echo_and_csrc_is_untouched():
    before = {p: p.read_bytes() for p in sorted(paths.CSRC.rglob("*.[ch]"))}
    c_exercises.check_poll_server(lab_function("loop/ev_poll.c", "ev_poll"))
    assert {p: p.read_bytes() for p in sorted(paths.CSRC.rglob("*.[ch]"))} == before


def test_a_dispatch_that_reports_nothing_fails_at_once_as_a_spinning_loop(monkeypatch):
    """The released stub: poll() says a descriptor is ready, fired[] stays empty, and
    the loop polls again at once, forever; the check says so within about a second, and
    kills the server at once: its loop never reads the stop pipe, so a SIGTERM would only
    have it spin on (5 s more of a CPU, in every graded notebook 01, before)."""
    from labkit import launcher

    stub = lab_function("loop/ev_poll.c", "ev_poll").replace("    int n = 0;\n", "    int n = 0;\n    (void)fired;\n"
                                                              "    return n;\n", 1)
    signals, stop_child = [], launcher.stop_child
    monkeypatch.setattr(launcher, "stop_child", lambda child, timeout, signum=signal.SIGTERM:
                        signals.append(signum) or stop_child(child, timeout, signum))
    started = time.monotonic()
    with pytest.raises(AssertionError, match=r"(?s)got 0 back, and for 1\.\d s the server answered nothing while "
                                             r"it used .* of CPU: its loop spins.*hint: after poll\(\) returns"):
        c_exercises.check_poll_server(stub, timeout=30)
    assert time.monotonic() - started < 15  # the build, then about a second: not the 30 s timeout
    assert signals == [signal.SIGKILL]


def test_dispatch_on_too_few_fds_times_out():
    """poll() on the first descriptor alone: the clients are never served, and the
    server sleeps in poll() meanwhile, so only the timeout ends the wait."""
    blind = lab_function("loop/ev_poll.c", "ev_poll").replace("(nfds_t)ev->nfds", "(nfds_t)1", 1)
    assert "(nfds_t)1" in blind
    with pytest.raises(AssertionError, match=r"(?s)got 0 back within 3 s.*hint: after poll\(\) returns") as failed:
        c_exercises.check_poll_server(blind, timeout=3)
    assert "spins" not in str(failed.value)


def test_a_dispatch_that_mixes_up_readable_and_writable_fails():
    code = lab_function("loop/ev_poll.c", "ev_poll")
    swapped = code.replace("? EV_READABLE : 0) |", "? EV_WRITABLE : 0) |", 1)
    swapped = swapped.replace("? EV_WRITABLE : 0);\n        mask &=", "? EV_READABLE : 0);\n        mask &=", 1)
    assert swapped.count("EV_WRITABLE") == code.count("EV_WRITABLE") and swapped != code
    with pytest.raises(AssertionError, match="hint: after poll"):
        c_exercises.check_poll_server(swapped, timeout=2)


def test_an_ev_poll_compile_error_shows_gccs_message_naming_the_cell():
    code = lab_function("loop/ev_poll.c", "ev_poll").replace("return n;", "return n")
    with pytest.raises(BuildError) as failed:
        c_exercises.build_poll_server(code)
    assert re.search(r"your ev_poll cell:\d+:\d+: error:", failed.value.output)


def test_code_without_the_function_is_refused():
    with pytest.raises(LabError, match="does not define ev_poll"):
        c_exercises.build_poll_server("int main(void) { return 0; }")


# ---------------------------------------------------------------------------
# close_connection: the lingering close, in a scratch threaded server

LINGERING = r"""
static void close_connection(int fd)
{
    shutdown(fd, SHUT_WR);
    uint64_t deadline = now_ns() + 2000000000u; /* the whole linger, not each read */
    char discard[4096];
    size_t drained = 0;
    for (uint64_t now; (now = now_ns()) < deadline && drained < (1u << 20);) {
        uint64_t left_us = (deadline - now) / 1000;
        struct timeval wait = { .tv_sec = (time_t)(left_us / 1000000), .tv_usec = (suseconds_t)(left_us % 1000000) };
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
        ssize_t got = read_some(fd, discard, sizeof discard);
        if (got <= 0)
            break;
        drained += (size_t)got;
    }
    close(fd);
}
"""

# Bounded per read only (the notebook's reference solution until a reviewer found it): a client
# sending a byte every 0.2 s keeps every read under the timeout, and holds the connection.
PER_READ_BOUND = r"""
static void close_connection(int fd)
{
    shutdown(fd, SHUT_WR);
    struct timeval wait = { .tv_sec = 1 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
    char discard[4096];
    size_t drained = 0;
    ssize_t got;
    while (drained < (1u << 20) && (got = read_some(fd, discard, sizeof discard)) > 0)
        drained += (size_t)got;
    close(fd);
}
"""


def test_plain_close_resets_the_client():
    """The labs plain close resets the client and the check says what to do."""
    before = {p: p.read_bytes() for p in sorted(paths.CSRC.rglob("*.[ch]"))}
    with pytest.raises(AssertionError, match=r"(?s)got ECONNRESET in recv\(\).*hint: before close\(\), shutdown"):
        c_exercises.check_lingering_close(lab_function("common/blocking.c", "close_connection"), tries=3)
    assert {p: p.read_bytes() for p in sorted(paths.CSRC.rglob("*.[ch]"))} == before


def test_a_bounded_lingering_close_passes_both_checks():
    c_exercises.check_lingering_close(LINGERING, silent_after=True)


def test_a_linger_without_a_bound_fails_the_hidden_check():
    unbounded = ("static void close_connection(int fd)\n{\n    shutdown(fd, SHUT_WR);\n    char b[4096];\n"
                 "    while (read(fd, b, sizeof b) > 0)\n        ;\n    close(fd);\n}\n")
    c_exercises.check_lingering_close(unbounded, tries=2)  # the visible check cannot tell
    with pytest.raises(AssertionError, match="silent client.*bound the whole linger"):
        c_exercises.check_lingering_close(unbounded, tries=1, silent_after=True, timeout=3)


def test_linger_per_read_fails_hidden_check():
    """A linger bounded per read fails the hidden check with a trickling client."""
    c_exercises.check_lingering_close(PER_READ_BOUND, tries=2)  # the visible check cannot tell
    with pytest.raises(AssertionError, match="a byte every 0.2 s.*bound the whole linger with a deadline"):
        c_exercises.check_lingering_close(PER_READ_BOUND, tries=1, silent_after=True, timeout=3)


def test_a_close_connection_compile_error_names_the_cell():
    with pytest.raises(BuildError) as failed:
        c_exercises.build_lingering_server(LINGERING.replace("close(fd);\n}", "close(fd)\n}"))
    assert re.search(r"your close_connection cell:\d+:\d+: error:", failed.value.output)


# ---------------------------------------------------------------------------
# fill_iovec: the writev array, in a scratch load generator


def test_the_labs_own_fill_iovec_passes_and_csrc_is_untouched():
    before = {p: p.read_bytes() for p in sorted(paths.CSRC.rglob("*.[ch]"))}
    code = lab_function("loadgen/strategies.c", "fill_iovec")
    c_exercises.check_fill_iovec(code)
    c_exercises.check_fill_iovec(code, shape=(100, 15), repetitions=50)
    assert {p: p.read_bytes() for p in sorted(paths.CSRC.rglob("*.[ch]"))} == before


@pytest.mark.parametrize("broken, says", [
    (("b < nbufs", "b + 1 < nbufs"), "the body ended after 40 of 60 bytes"),
    (("iov_base = bufs[b]", "iov_base = bufs[nbufs - 1 - b]"), "body byte 0 (repetition 0, offset 0 in it)"),
    (("    if (head_len > 0)\n        iov[n++] = (struct iovec){ .iov_base = (char *)head, .iov_len = head_len };\n",
      "    (void)head;\n    (void)head_len;\n"), "no request line"),
    (("    return n;", "    return 0;"), "fill_iovec returned 0 entries"),
])
def test_a_wrong_iovec_fails_with_what_arrived_and_a_hint(broken, says):
    code = lab_function("loadgen/strategies.c", "fill_iovec").replace(*broken)
    with pytest.raises(AssertionError, match="hint:") as failed:
        c_exercises.check_fill_iovec(code)
    assert says in str(failed.value)


# ---------------------------------------------------------------------------
# shed_idle, the event loop's idle timeout, in a scratch epoll server (notebook 06)


def test_the_labs_own_shed_idle_passes_both_checks_and_csrc_is_untouched():
    before = {p: p.read_bytes() for p in sorted(paths.CSRC.rglob("*.[ch]"))}
    code = lab_function("loop/loop.c", "shed_idle")
    c_exercise_shed.check_shed_idle(code)
    c_exercise_shed.check_shed_idle(code, timeout_s=0.6, silent=2, talkers=2, stuck=1)
    assert {p: p.read_bytes() for p in sorted(paths.CSRC.rglob("*.[ch]"))} == before


_SHED_BODY = ("        if (c->session != NULL && now - c->last_active_ns >= l->idle_ns) {\n")


@pytest.mark.parametrize("broken, says", [
    # the released stub: nothing is ever shed
    (lambda code: code.split("/* BEGIN SOLUTION */")[0] + "(void)l; (void)now;\n}\n",
     r"a client that sent nothing was still open .* s after it connected"),
    # no look at the time: every connection goes at the first sweep, the talker too
    (lambda code: code.replace(_SHED_BODY, "        if (c->session != NULL) { (void)now;\n"),
     r"closed after 0\.\d+ s, before the 1 s|a client that kept talking|the server closed a client that sent"),
    # closed but not counted: the server's own report disagrees
    (lambda code: code.replace("            atomic_fetch_add_explicit(&server_counters.shed_idle, 1, "
                               "memory_order_relaxed);\n", ""),
     r"the server says it shed 0 connection\(s\); it closed 1"),
])
def test_a_wrong_shed_idle_fails_with_what_happened_and_a_hint(broken, says):
    code = broken(lab_function("loop/loop.c", "shed_idle"))
    assert code != lab_function("loop/loop.c", "shed_idle")
    with pytest.raises(AssertionError, match=says):
        c_exercise_shed.check_shed_idle(code)


def test_a_shed_idle_compile_error_names_the_cell():
    code = lab_function("loop/loop.c", "shed_idle").replace("close_conn(l, fd);", "close_conn(l, fd)")
    with pytest.raises(BuildError) as failed:
        c_exercise_shed.build_shedding_server(code)
    assert re.search(r"your shed_idle cell:\d+:\d+: error:", failed.value.output)
