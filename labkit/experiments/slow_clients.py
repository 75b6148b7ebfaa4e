"""Experiment 6, what breaks first: slow and silent clients beside well-behaved ones.

`bad` misbehaving connections connect first (a server that serves in arrival order
meets them first), then `clients` well-behaved ones offer `rate` requests per second
of echo for `duration` seconds.  The misbehaving kinds (loadgen --bad-kind):
silent, a client that sends and never reads (the server's output to it backs up);
slow, one that reads 1 KiB per interval; drip, one that sends a byte per interval
(Slowloris).  The server's --idle-timeout closes a connection on which nothing moved
for that long (0: never).  Who is stuck (the well-behaved clients time out), who
sheds (the server closes the misbehaving ones: their fate is in bad_closed_by_server),
who keeps serving the others: served_fraction is the share of the well-behaved
clients' requests answered."""

from labkit.experiments import Experiment, Figure
from labkit.params import (BOTH, SERVER, Choice, ChoiceList, Int, IntList, Models, Number, Param, arrivals_param,
                           cpu_params, placement_params, repeats_param)

EXPERIMENT = Experiment(
    name="slow_clients",
    title="Slow and silent clients: who is stuck, who sheds, who keeps serving the others",
    parameters=(
        Param("models", Models(), ["threaded", "pool", "prefork", "epoll"], "server models to compare",
              to=SERVER),
        Param("bad_kind", ChoiceList("silent", "slow", "drip"), ["silent", "drip"],
              "how the misbehaving clients behave: silent (never reads), slow (reads 1 KiB per interval), "
              "drip (sends a byte per interval, Slowloris)", flag="bad-kind", label="misbehaving clients"),
        Param("idle_timeout", IntList(least=0, noun="idle timeout", unit="seconds"), [0, 1],
              "the server closes a connection idle this many seconds (0: never)", to=SERVER, flag="idle-timeout",
              label="server idle timeout (s)"),
        Param("bad", Int(least=1), 2, "misbehaving connections, connected before the others"),
        Param("bad_interval", Number(), 0.5, "seconds between a slow reader's reads or a drip's bytes",
              flag="bad-interval"),
        Param("workers", Int(least=1), 2, "workers of pool and prefork: as many as misbehaving clients",
              to=SERVER),
        Param("clients", IntList(least=1, noun="client count", unit="clients"), [10],
              "well-behaved connections", label="well-behaved connections"),
        Param("rate", Number(), 200, "their requests per second in all (open loop)"),
        arrivals_param(),
        Param("duration", Number(), 2, "seconds of load"),
        Param("size", Int(least=1), 64, "bytes per echo message"),
        repeats_param(3),
        Param("service", Choice("top", "echo", "sink"), "echo", "the service the server runs", to=BOTH, fixed=True),
        Param("engine", Choice("events", "threads"), "events", "load generator engine", fixed=True),
        *cpu_params(),
        *placement_params(),
    ),
    x="bad_kind",
    chart="bars",
    timeout=3.0,  # a well-behaved request unanswered this long is lost: a stuck server ends the point
    profiles={"quick": {"models": ["pool", "epoll"], "repeats": 1}},
    figures=(
        Figure("served_fraction", include_failed=True), Figure("bad_closed_by_server", include_failed=True),
        Figure("server_shed_idle", include_failed=True), Figure("lat_p99_us", log_y=True),
        Figure("lost_connections", include_failed=True),
    ),
)
