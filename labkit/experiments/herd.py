"""Experiment 6, what breaks first: the thundering herd.

Worker processes accepting on one port, and short connections arriving one at a time:
an open loop opens a new connection for each echo exchange (loadgen --reconnect), `rate`
a second, so each arrival finds the workers asleep.  Every worker that the kernel wakes
for the new connection and that does not get it has been woken for nothing.  Two counts
show it:
  * the server's context switches per connection (perf): every wake-up, futile ones
    included, since select() and epoll_wait() re-check readiness inside the kernel after
    a wake-up and go back to sleep there when another worker took the connection;
  * the futile accepts the workers saw themselves (labkit.server_counters): told the
    listener was ready, their first accept() found nothing (EAGAIN): another worker took
    the connection between the re-check and the accept(), running on another CPU or, on
    one CPU, preempting it in that gap (the loop serves its ready clients before it
    accepts).
select_fork: every process selects on the shared listener, so all are woken;
epoll_workers: EPOLLEXCLUSIVE wakes one idle worker (or a few); epoll_reuseport: a
listener per worker, the kernel hashing each connection to one; prefork: blocking
accept(), where the kernel wakes one waiter."""

from labkit.experiments import Experiment, Figure
from labkit.params import (BOTH, SERVER, Choice, Flag, Int, IntList, Models, Number, Param, arrivals_param,
                           cpu_params, placement_params, repeats_param)

EXPERIMENT = Experiment(
    name="herd",
    title="The thundering herd: wake-ups per connection and connections per worker",
    parameters=(
        Param("models", Models(), ["select_fork", "epoll_workers", "epoll_reuseport", "prefork"],
              "worker models to compare", to=SERVER),
        Param("workers", IntList(least=1, most=4096, noun="worker count", unit="workers"), [2, 4, 8],
              "worker processes", to=SERVER, label="workers"),
        Param("rate", Number(), 500, "new connections per second (open loop), each one echo exchange"),
        arrivals_param(),
        Param("duration", Number(), 2, "seconds of load"),
        Param("clients", IntList(least=1, noun="client count", unit="clients"), [20],
              "client slots: each exchange opens a connection of its own", label="client slots"),
        Param("size", Int(least=1), 64, "bytes per echo message"),
        repeats_param(3),
        Param("reconnect", Flag(), True, "a new connection for every exchange", fixed=True),
        Param("service", Choice("top", "echo", "sink"), "echo", "the service the server runs", to=BOTH, fixed=True),
        Param("engine", Choice("events", "threads"), "events", "load generator engine", fixed=True),
        *cpu_params(),
        *placement_params(),
    ),
    x="workers",
    profiles={"quick": {"workers": [4], "duration": 1, "repeats": 1}},
    figures=(
        Figure("server_cs_per_request"), Figure("futile_accepts_per_connection"),
        Figure("wakeups_per_connection"), Figure("busiest_worker_share"), Figure("server_cpu_us_per_request"),
        Figure("lat_p99_us"), Figure("lost_connections", include_failed=True),
    ),
)
