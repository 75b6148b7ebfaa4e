"""Experiment 2 (seed 003): echo at scale, every readiness and worker model,
5,000 and 10,000 connections all open at once, 200 and 300 exchanges each."""

from labkit.experiments import Experiment, Figure
from labkit.params import (BOTH, SERVER, Choice, Int, IntList, Models, Param, cpu_params, placement_params,
                           profile_stacks_param, repeats_param)

# Every readiness model and every model with workers (not the iterative one,
# which would serve 10,000 clients one after the other).
SCALE_MODELS = ["threaded", "select", "poll", "epoll", "epoll_et", "uring",
                "select_fork", "epoll_workers", "pool", "prefork", "fork"]

EXPERIMENT = Experiment(
    name="echo_scale",
    title="Echo at scale (seed 003): every readiness and worker model, thousands of clients",
    parameters=(
        Param("models", Models(), SCALE_MODELS, "server concurrency models to compare", to=SERVER),
        # seed 003's grid: 5k and 10k clients x 200 and 300 exchanges
        Param("clients", IntList(least=1, noun="client count", unit="clients"), [5000, 10000],
              "concurrent connections, all open at once (seed 003: 5000, 10000)", label="concurrent clients"),
        Param("exchanges", IntList(least=1, noun="exchange count", unit="exchanges"), [200, 300],
              "echo round trips per connection (seed 003: 200, 300)", flag="requests",
              label="exchanges per connection"),
        # seed 003's client sends a message given on its command line; it never says how long
        Param("size", Int(least=1), 64, "bytes per message"),
        Param("workers", Int(least=1, optional=True, empty="one per CPU"), None,
              "processes or threads for the worker models (empty: one per CPU)", to=SERVER),
        repeats_param(3),
        profile_stacks_param(True),
        Param("service", Choice("top", "echo", "sink"), "echo", "the service the server runs", to=BOTH,
              fixed=True),
        Param("engine", Choice("events", "threads"), "events",
              "load generator engine (events: one process for 10,000 connections)", fixed=True),
        *cpu_params(),
        *placement_params(),
    ),
    x="clients",
    chart="bars",
    profiles={"quick": {"profile_stacks": False, "models": ["threaded", "select", "poll", "epoll", "epoll_workers"],
                        "clients": [500, 2000], "exchanges": [20], "repeats": 1}},
    figures=(
        Figure("lat_p99_us", log_y=True), Figure("lat_p50_us", log_y=True), Figure("throughput_rps"),
        Figure("elapsed_s"), Figure("lost_connections", include_failed=True),
        Figure("server_cpu_us_per_request"), Figure("server_cs_per_request"),
        Figure("server_task-clock"), Figure("server_context-switches"),
    ),
)
