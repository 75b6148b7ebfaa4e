"""Experiment 4, second part: Nagle's algorithm meets delayed ACK.  Each exchange writes a
request line and a 100-byte body and waits for the reply (write-write-read); with
TCP_NODELAY off the body waits for the ACK of the line, which the server may delay (by at
least 40 ms on Linux, TCP_DELACK_MIN; the timeout adapts to the round trip and can grow
towards 200 ms), unless the two writes become one (writev, single).  Not every exchange
stalls (quickack at the start, pingpong mode left and re-entered): read the p99 and the
histogram, not only the p50."""

from labkit.experiments import Experiment, Figure
from labkit.params import (BOTH, SERVER, Choice, ChoiceList, Int, IntList, Models, Param, Shapes, cpu_params,
                           autocorking_param, placement_params, profile_stacks_param, repeats_param)

EXPERIMENT = Experiment(
    name="nagle",
    title="Nagle with delayed ACK: write-write-read exchanges, TCP_NODELAY off and on",
    parameters=(
        Param("models", Models(), ["threaded"], "server models", to=SERVER),
        Param("strategy", ChoiceList("many", "writev", "single", "msg_more", "cork"), ["many", "writev", "single"],
              "many: the line and the body are two writes; writev, single: one", label="write strategy"),
        Param("nodelay", ChoiceList("off", "on"), ["off", "on"], "TCP_NODELAY on the client's socket"),
        Param("exchanges", Int(least=1), 50, "write-write-read exchanges per point", flag="requests"),
        Param("shape", Shapes(), ["1x100"], "the body: N buffers of B bytes", label="buffers x bytes"),
        Param("clients", IntList(least=1, noun="connection count", unit="connections"), [1], "connections",
              label="connections"),
        repeats_param(3),
        profile_stacks_param(),
        Param("service", Choice("sink"), "sink", "the service the server runs", to=BOTH, fixed=True),
        *cpu_params(),
        *placement_params(),
        autocorking_param(),
    ),
    x="nodelay",
    chart="bars",
    client_is_subject=True,  # the sender's write calls are the lesson
    timeout=10.0,
    profiles={"quick": {"exchanges": 8, "repeats": 1}},
    figures=(Figure("lat_p50_us", log_y=True), Figure("lat_p99_us", log_y=True), Figure("throughput_rps"),
             Figure("data_segments_per_repetition")),
)
