"""Experiment 6, what breaks first: the accept queue overflowing.

As in seed 000, each client is a thread that connects, asks for the top processes once
and leaves, all at the same moment.  A connection whose handshake is done waits in the
listener's accept queue until the server calls accept(); the queue holds the listen()
backlog, capped at net.core.somaxconn, plus one (sk_acceptq_is_full() is a '>').  When
it is full, Linux drops the SYN (TcpExt ListenOverflows and ListenDrops count it) and
the client sends it again when its retransmission timeout expires: 1 s after the first
(TCP_TIMEOUT_INIT), then doubling (1, 3, 7 s), or, on Linux 6.5 and later with
net.ipv4.tcp_syn_linear_timeouts = n (default 4), every 1 s for the first n + 1 timeouts
(1, 2, 3, 4, 5 s) before doubling: connect times gather at those times
(labkit.what_breaks.syn_schedule, syn_retry_times).  The backlog bounds the SYN queue too; with
net.ipv4.tcp_syncookies = 1 a SYN beyond it gets a cookie instead, whose SYN-ACK is never
sent again.  labkit.kernel_view samples the queue (ss
-lnt's Recv-Q) while the clients connect."""

from labkit.experiments import Experiment, Figure
from labkit.params import (BOTH, SERVER, Choice, Int, IntList, Models, Param, cpu_params, placement_params,
                           repeats_param)

EXPERIMENT = Experiment(
    name="accept_queue",
    title="The accept queue: a burst of connects against the listen() backlog (seed 000's 1.14 s)",
    parameters=(
        # not iterative: it would serve the first connection, whose thread waits at the load
        # generator's start gate for the others, which wait in the full queue (until --connect-timeout)
        Param("models", Models(), ["threaded", "select", "epoll"], "server models to compare", to=SERVER),
        Param("backlog", IntList(least=1, most=65535, noun="backlog", unit="connections"), [4, 128],
              "the server's listen() backlog (the kernel caps it at net.core.somaxconn)", to=SERVER,
              label="listen backlog"),
        Param("clients", IntList(least=1, noun="client count", unit="clients"), [10, 50, 100, 200],
              "clients connecting at the same moment (seed 000: 10, 50, 100)", label="clients at once"),
        Param("requests", Int(least=1), 1, "requests per connection (seed 000: one)"),
        Param("k", Int(least=1), 2, "processes per top reply"),
        repeats_param(3),
        Param("service", Choice("top", "echo", "sink"), "top", "the service the server runs", to=BOTH, fixed=True),
        Param("engine", Choice("events", "threads"), "threads",
              "load generator engine (threads: a thread per client, all connecting at once, as seed 000's)",
              fixed=True),
        *cpu_params(),
        *placement_params(),
    ),
    x="clients",
    chart="bars",
    watch=("accept_queue",),
    # A connection whose handshake's last ACK the full queue dropped looks established to the client;
    # one the server never completes is lost after this many seconds (ETIMEDOUT), its point failed.
    timeout=5.0,
    profiles={"quick": {"models": ["threaded", "epoll"], "clients": [100], "repeats": 1}},
    figures=(
        # measured whether or not some requests then timed out: failed points' values are drawn too
        Figure("connect_p99_us", log_y=True, include_failed=True), Figure("connects_over_1s", include_failed=True),
        Figure("tcp_listenoverflows", include_failed=True), Figure("accept_queue_max", include_failed=True),
        Figure("elapsed_s", include_failed=True), Figure("connect_p50_us", log_y=True, include_failed=True),
        Figure("lost_connections", include_failed=True),
    ),
)
