"""Experiment 3 (seed 002): uploads of 1 KB to 10 MB over 1 to 10,000 connections, to a
thread per connection, a busy-polling loop, POSIX AIO polled, select, epoll and io_uring.

Every connection is opened before the first byte is sent; each then uploads one body
(`PUT <n>` to the sink service) and the time runs to the last `OK`.  The server is told
how many connections to expect (--expect), as seed 002's servers were, and its own time
for the batch is recorded beside the client's."""

from labkit.experiments import Experiment, Figure
from labkit.params import (BOTH, SERVER, SWEEP, Choice, Int, IntList, Models, Number, Param, Size, Sizes,
                           cpu_params, placement_params, profile_stacks_param, repeats_param, size_text)

UPLOAD_MODELS = ["threaded", "busypoll", "aio", "select", "epoll", "uring"]


def over_the_cap(point: dict, plan) -> str:
    """A point that would move more than the plan's max_bytes is left out (10k x 10 MB is 100 GB)."""
    total = point["clients"] * point["size"]
    if total <= plan["max_bytes"]:
        return ""
    return (f"{point['clients']:,} x {size_text(point['size'])} = {size_text(total)} is over "
            f"max_bytes {size_text(plan['max_bytes'])}")


EXPERIMENT = Experiment(
    name="uploads",
    title="Uploads (seed 002): 1 KB to 10 MB over 1 to 10,000 connections",
    parameters=(
        Param("models", Models(), UPLOAD_MODELS, "server concurrency models to compare", to=SERVER),
        Param("clients", IntList(least=1, noun="connection count", unit="connections"),
              [1, 100, 1000, 5000, 10000], "connections, all open before the first byte (seed 002: 1 to 10k)",
              label="connections", server_flag="expect"),
        Param("size", Sizes(least=1), [1024, 10240, 102400, 1024 ** 2, 5 * 1024 ** 2, 10 * 1024 ** 2],
              "bytes each connection uploads (seed 002: 1KB, 10KB, 100KB, 1MB, 5MB, 10MB); with vary, the largest",
              label="upload size"),
        Param("vary", Choice("none", "uniform", "log"), "none",
              "none: every body is `size`; uniform or log: each connection's size drawn from 1 KB to `size`"),
        Param("seed", Int(least=0), 1, "the draw's seed (vary): the same seed gives the same sizes"),
        Param("max_bytes", Size(), 16 * 1024 ** 3,
              "points moving more than this in all are left out (10k x 10MB would be 100GB)", to=SWEEP),
        repeats_param(3),
        profile_stacks_param(),
        Param("service", Choice("top", "echo", "sink"), "sink", "the service the server runs", to=BOTH,
              fixed=True),
        Param("engine", Choice("events", "threads"), "events",
              "load generator engine (events: one process for 10,000 uploads)", fixed=True),
        Param("expect_timeout", Number(), 600, "seconds the server waits for a batch that falls short",
              to=SERVER, flag="expect-timeout", fixed=True),
        *cpu_params(),
        *placement_params(),
    ),
    x="clients",
    log_x=True,
    leave_out=over_the_cap,
    profiles={"quick": {"models": ["threaded", "busypoll", "aio", "select", "epoll"],
                        "clients": [1, 100], "size": [102400, 10 * 1024 ** 2], "repeats": 1}},
    figures=(
        Figure("transfer_s", log_y=True), Figure("goodput_gbit_s"), Figure("server_batch_s", log_y=True),
        Figure("server_cpu_ms_per_mb", log_y=True), Figure("server_reads_per_request", log_y=True),
        Figure("server_task-clock"), Figure("server_context-switches"), Figure("elapsed_s", log_y=True),
        Figure("lost_connections", include_failed=True),
    ),
)
