"""Experiment 6, what breaks first: memory per connection.

`idle` connections held open and silent beside a few active ones, for each model:
while they are held, labkit.kernel_view samples the server's resident memory (VmRSS
summed over its processes) and the kernel's own (Slab, KernelStack, PageTables in
/proc/meminfo); each grown amount over the connections held is a cost per connection.
A thread per connection pays a kernel stack, a task_struct (in the slab) and the stack
pages its thread touched; an event loop pays a session and an entry in its watch set.  Over loopback the kernel's
figure counts both ends of each connection, since the client's sockets live in the
same kernel."""

from labkit.experiments import Experiment, Figure
from labkit.params import (BOTH, SERVER, Choice, Int, IntList, Models, Number, Param, arrivals_param, cpu_params,
                           placement_params, repeats_param)

EXPERIMENT = Experiment(
    name="conn_memory",
    title="Memory per connection: thread stacks against event-loop sessions",
    parameters=(
        Param("models", Models(), ["threaded", "poll", "epoll", "uring"], "server models to compare", to=SERVER),
        Param("idle", IntList(least=0, noun="idle count", unit="idle connections"), [1000, 10000],
              "silent connections held open", label="connections held"),
        Param("clients", IntList(least=1, noun="client count", unit="clients"), [10], "active connections",
              label="active connections"),
        Param("rate", Number(), 100, "the active ones' requests per second (open loop)"),
        arrivals_param(),
        Param("duration", Number(), 1, "seconds of load while the connections are held"),
        Param("size", Int(least=1), 64, "bytes per echo message"),
        repeats_param(3),
        Param("service", Choice("top", "echo", "sink"), "echo", "the service the server runs", to=BOTH, fixed=True),
        Param("engine", Choice("events", "threads"), "events", "load generator engine", fixed=True),
        *cpu_params(),
        *placement_params(),
    ),
    x="idle",
    chart="bars",
    watch=("memory",),
    profiles={"quick": {"models": ["threaded", "epoll"], "idle": [1000], "repeats": 1}},
    figures=(
        Figure("server_rss_kib_per_connection"), Figure("kernel_kib_per_connection"),
        Figure("kernel_kernelstack_kib_per_connection"), Figure("kernel_slab_kib_per_connection"),
        Figure("lat_p99_us", log_y=True), Figure("lost_connections", include_failed=True),
    ),
)
