"""Experiment 4 (seed 004): one connection writes the same bytes as many write() calls, one
writev() or one copied write() (and the modern MSG_MORE and TCP_CORK), for buffer shapes
15x100 to 100x15, with Nagle's algorithm on and off; times, and the counts that explain
them: system calls, TCP segments, the server's reads."""

from labkit.experiments import Experiment, Figure
from labkit.params import (BOTH, SERVER, Choice, ChoiceList, Int, IntList, Models, Param, Shapes, cpu_params,
                           autocorking_param, placement_params, profile_stacks_param, repeats_param)
from labkit.perf import SYSCALL_EVENTS

STRATEGIES = ("many", "writev", "single", "msg_more", "cork")

EXPERIMENT = Experiment(
    name="write_strategies",
    title="Write strategies (seed 004): many write() vs writev() vs one write(), 15x100 to 100x15 buffers",
    parameters=(
        # seed 004's server reads with a helper thread per client: the threaded model
        Param("models", Models(), ["threaded"], "server models (seed 004: a thread per client)", to=SERVER),
        Param("strategy", ChoiceList(*STRATEGIES), ["many", "writev", "single"],
              "how each repetition is written (seed 004: types 1, 2, 3 = many, writev, single)",
              label="write strategy"),
        Param("shape", Shapes(), ["15x100", "30x50", "60x25", "100x15"],
              "a repetition is N buffers of B bytes, 1,500 bytes in all in the seed", label="buffers x bytes"),
        Param("nodelay", ChoiceList("off", "on"), ["off", "on"],
              "TCP_NODELAY: off leaves Nagle's algorithm on, as seed 004's sockets had it"),
        Param("repetitions", Int(least=1), 20000, "repetitions of the buffers per upload (seed 004: 20,000)"),
        Param("clients", IntList(least=1, noun="connection count", unit="connections"), [1],
              "connections, each writing the whole upload", label="connections"),
        repeats_param(3),
        profile_stacks_param(),
        Param("service", Choice("sink"), "sink", "the service the server runs", to=BOTH, fixed=True),
        Param("requests", Int(least=1), 1, "uploads per connection", fixed=True),
        *cpu_params(),
        *placement_params(),
        autocorking_param(),
    ),
    x="shape",
    chart="bars",
    client_is_subject=True,  # the sender's write calls are the lesson
    events=tuple(SYSCALL_EVENTS),
    profiles={"quick": {"shape": ["15x100", "100x15"], "repetitions": 2000, "repeats": 1}},
    figures=(
        Figure("send_gbit_s"), Figure("send_s", log_y=True), Figure("write_calls_per_repetition", log_y=True),
        Figure("client_write_syscalls_per_repetition", log_y=True),
        Figure("data_segments_per_repetition", log_y=True), Figure("server_reads_per_repetition", log_y=True),
        Figure("server_read_syscalls_per_repetition", log_y=True), Figure("client_task-clock"),
    ),
)
