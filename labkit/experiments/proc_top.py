"""Experiment 1 (seeds 000 and 001): the top-CPU /proc service, iterative vs a
thread per connection vs select, 10 to 100 concurrent clients of one request."""

from labkit.experiments import Experiment, Figure
from labkit.params import (BOTH, SERVER, Choice, Int, IntList, Models, Param, cpu_params, placement_params,
                           profile_stacks_param, repeats_param)

EXPERIMENT = Experiment(
    name="proc_top",
    title="Top-CPU /proc service: iterative vs thread per connection vs select",
    parameters=(
        Param("models", Models(), ["iterative", "threaded", "select"], "server concurrency models to compare",
              to=SERVER),
        Param("clients", IntList(least=1, noun="client count", unit="clients"), [10, 50, 100],
              "numbers of concurrent clients (the seeds used 3, 6, 10)", label="concurrent clients"),
        # the seeds' client sends one request per connection
        Param("requests", Int(least=1), 1, "requests each client sends on its connection"),
        repeats_param(3),
        profile_stacks_param(),
        Param("k", Int(least=1), 2, "how many top processes each reply lists"),
        Param("service", Choice("top", "echo", "sink"), "top", "the service the server runs", to=BOTH,
              fixed=True),
        *cpu_params(),
        *placement_params(),
    ),
    x="clients",
    profiles={"quick": {"clients": [10, 50], "repeats": 1}},
    figures=(
        Figure("elapsed_s"), Figure("server_context-switches"), Figure("server_task-clock"),
        Figure("client_task-clock"), Figure("lat_p50_us"), Figure("lat_p99_us"), Figure("throughput_rps"),
        Figure("server_cycles"),
    ),
)
