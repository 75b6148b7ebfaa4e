"""Seed 002's failure cases, each provoked by labkit.failures as notebook 03 does:
the errno each side sees, the server's own words, and a server that still serves.
Nothing a case starts outlives it."""

import psutil
import pytest

from labkit import failures, launcher
from labkit.errors import LabError

pytestmark = pytest.mark.measuring  # make test runs it alone (tests/conftest.py)


def _no_children_left():
    assert psutil.Process().children(recursive=True) == []
    assert launcher.live_children() == []


def test_no_server_refuses_every_connection_at_once():
    case = failures.no_server(clients=15)
    assert case.client_errors == {"ECONNREFUSED": 15}
    assert "0 ok" in case.client_said
    _no_children_left()


@pytest.mark.parametrize("model", ["threaded", "epoll", "aio"])
def test_fewer_clients_than_expected_is_reported_at_the_deadline(model):
    case = failures.fewer_clients(model, expect=8, clients=3, expect_timeout=0.5)
    assert case.client_errors == {}
    assert "expect: batch 1: timed out after 0.5 s: 3 of 8 connections arrived, 3 done" in case.server_said
    assert case.details["reported"]
    assert "the server still serves" in case.still_serves
    _no_children_left()


def test_fewer_clients_needs_fewer_clients():
    with pytest.raises(LabError, match="must be fewer than expect"):
        failures.fewer_clients(expect=3, clients=3)


def test_a_second_batch_completes_the_first_and_leaves_a_short_one():
    # Batch 1's window starts at its first connection and must hold the second load generator's
    # start too (a process spawned 50 ms later): 2 s, as notebook 03 gives it, not 0.5, which a
    # busy machine's spawn could outlast.
    case = failures.second_batch("threaded", expect=6, first=2, expect_timeout=2)
    assert case.client_errors == {}
    assert "expect: batch 1: 6 of 6 connections done" in case.server_said
    assert "expect: batch 2: timed out after 2 s: 2 of 6 connections arrived, 2 done" in case.server_said
    assert "the server still serves" in case.still_serves
    _no_children_left()


@pytest.mark.parametrize("model", ["threaded", "select", "aio"])
def test_too_many_open_files_the_client_refuses_and_the_server_sheds(model):
    case = failures.too_many_open_files(model, clients=120, limit=64)
    assert "(a) the load generator refused its arguments" in case.client_said
    assert "at most" in case.client_said and "ulimit -n" in case.client_said
    # 64 connections held open first fill the server, whatever the timing; then each of
    # the 56 uploads is accepted and closed at once (shed), and none is lost unexplained
    assert set(case.client_errors) <= {"EOF", "ECONNRESET", "EPIPE"}
    assert "56 clients (+0 idle)" in case.client_said and "0 ok, 56 failed" in case.client_said
    assert sum(case.client_errors.values()) == 56
    assert "out of file descriptors (limit 64): shed a connection" in case.server_said
    assert "the server still serves" in case.still_serves
    _no_children_left()


def test_too_many_open_files_needs_more_clients_than_the_limit():
    with pytest.raises(LabError, match="must exceed limit"):
        failures.too_many_open_files(clients=10, limit=64)


@pytest.mark.parametrize("model", ["threaded", "epoll"])
def test_a_close_with_unread_bytes_resets_the_client(model):
    case = failures.reset_on_close(model)
    assert case.client_errors == {"ECONNRESET": 1}
    assert case.details["error"] == "ECONNRESET"
    assert "the server still serves" in case.still_serves
    _no_children_left()


def test_connects_beyond_a_full_accept_queue_time_out():
    case = failures.connect_timeout("epoll", connect_timeout=0.5, beyond=50)
    backlog = case.details["backlog"]
    assert set(case.client_errors) == {"ETIMEDOUT"}
    assert "connections failed: 50" in case.client_said or "connections failed: 49" in case.client_said \
        or "connections failed: 51" in case.client_said, case.client_said  # the queue holds backlog + 1
    assert case.client_errors["ETIMEDOUT"] == backlog + 50
    assert "the server still serves" in case.still_serves
    _no_children_left()


def test_twenty_silent_clients_take_the_whole_aio_pool_but_not_epoll():
    aio = failures.silent_clients("aio", silent=25, timeout=1.0)
    assert aio.details["stalled"] and aio.client_errors == {"ETIMEDOUT": 1}
    # glibc's pool: at most 20 threads beside the main one (aio_init's default)
    assert aio.details["threads_before"] == 1 and aio.details["threads_during"] == 21
    assert "the server still serves" in aio.still_serves
    epoll = failures.silent_clients("epoll", silent=25, timeout=1.0)
    assert not epoll.details["stalled"] and epoll.details["threads_during"] == 1
    _no_children_left()


def test_a_case_shows_as_a_card_with_every_part():
    card = failures.no_server(clients=3)._repr_html_()
    for part in ("1. No server", "the client saw", "ECONNREFUSED x 3", "why", "afterwards"):
        assert part in card
