"""A test's own experiment, declared in this file alone (no edit to labkit): echo
round trips against the message size, with a server flag and a load generator
flag that no lab experiment uses.  tests/measurement/test_experiments.py points
LABKIT_EXPERIMENTS at this folder and runs it through `labkit sweep`, the
control panel and the plots."""

from labkit.experiments import Experiment, Figure
from labkit.params import BOTH, SERVER, Choice, Int, IntList, Models, Param, cpu_params, repeats_param

EXPERIMENT = Experiment(
    name="echo_sizes",
    title="Echo round trips against the message size",
    parameters=(
        Param("models", Models(), ["select", "epoll_workers"], "server models", to=SERVER),
        Param("size", IntList(least=1, noun="message size", unit="bytes"), [16, 4096], "bytes per message",
              label="message size (bytes)"),
        Param("clients", IntList(least=1, noun="client count", unit="clients"), [3], "concurrent connections"),
        Param("exchanges", Int(least=1), 20, "round trips per connection", flag="requests"),
        Param("workers", Int(least=1), 1, "worker processes of the worker models", to=SERVER),
        Param("connect_timeout", Int(least=1), 3, "seconds loadgen waits for each connect",
              flag="connect-timeout"),
        repeats_param(2),
        Param("service", Choice("echo"), "echo", "the service", to=BOTH, fixed=True),
        Param("engine", Choice("events", "threads"), "events", "load generator engine", fixed=True),
        *cpu_params(),
    ),
    x="size",
    profiles={"quick": {"repeats": 1}},
    figures=(Figure("lat_p50_us", log_y=True), Figure("throughput_rps")),
)
