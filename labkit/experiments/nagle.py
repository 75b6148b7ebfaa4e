"""Experiment 4, second part: Nagle's algorithm meets delayed ACK.  Each exchange writes a
request line and a 100-byte body and waits for the reply (write-write-read); with
TCP_NODELAY off the body waits for the ACK of the line, which the server may delay, unless
the two writes become one (writev, single).  The delay: an ATO the kernel sets from the gaps
between arriving segments (tcp_event_data_recv), capped when the timer is armed at
max(smoothed RTT, 40 ms) and at 200 ms (tcp_send_delayed_ack; TCP_DELACK_MIN and
TCP_DELACK_MAX): about 40 ms on loopback.  40 ms is a default that TCP_QUICKACK or a route's
quickack can undercut, and from Linux 6.7 a route's locked rto_min (`ip route ... rto_min 5ms`
always locks it), which caps the timer one jiffy below it (tcp_delack_max, commit "tcp: derive
delack_max from rto_min"): the stall then lasts about that rto_min, in whole ticks (measured
on 6.18 at 250 Hz: 44 ms by default, 8 ms at rto_min 5ms); on 6.6 and earlier rto_min leaves
it at about 40 ms (kernel_view.rto_min_note).  Which exchanges stall: the ACK is delayed only in
pingpong mode, entered after a threshold of quick replies (tcp_event_data_sent) and left
when the timer fires (tcp_delack_timer_handler); out of it the server's read sends the ACK
at once (tcp_cleanup_rbuf).  With a threshold of 1 (before Linux 5.1, and from 5.19) every
exchange after the first stalls; with 3 (5.1 to 5.18) some do, or none;
net.ipv4.tcp_pingpong_thresh (Linux 6.7) sets it (kernel_view.delayed_ack_note)."""

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
