"""The lab measured against its anchors: `labkit bench rtt | throughput | events | upload | scaling |
queueing | replications`.

  rtt         the lab's load generator against the epoll echo server, one
              connection, ping-pong, beside sockperf against sockperf's own
              server: same pinning, same run, interleaved rounds (A B A B ...)
              so that drift on the machine hits both.  Target: the lab's
              median round trip within RTT_TARGET x sockperf's.
  throughput  closed-loop echo throughput of every server model at 100
              connections, each measured by measure.point (the sweeps' own
              pipeline and row schema: the server's CPU time per request when
              perf or /proc counts it), stored as JSON Lines under
              data/results/bench/ (as are the events rows).
  events      csrc/bench/ev_bench.c (libevent's test/bench.c idea) for the
              select, poll and epoll backends as the watched descriptors grow.
  upload      one connection uploading 10 MB bodies to each server model
              (sink), beside iperf3's single TCP stream: same pinning,
              interleaved rounds.  Target: the best model's goodput at
              UPLOAD_TARGET x iperf3's or better.
  scaling     a worker model (epoll_workers) at 1, 2, 4 ... workers, each on
              CPUs of its own, against the load generator on all the other
              CPUs (one event loop each).  Target: W workers serve at least
              SCALING_TARGET x W times one worker, the generator never the limit.
  queueing    the anchor is theory: the epoll server with the spin service (a
              declared service time per request) under even and Poisson
              arrivals, fixed and exponential service times, at utilisation
              0.3, 0.5 and 0.7, each point in independent replications
              (a seed each, interleaved), its measured mean and p99
              response beside the textbook's queue replayed on the run's
              own draws (labkit.calibration) and the closed form
              (labkit.queue_theory), each ratio with its interval.
  replications one spin point measured 30 times, a seed each: how often a run's own
              interval (labkit.batches) holds the median of all the runs.

Each function returns its figures (a dict or a pandas DataFrame) and the
format_* functions turn them into the text the CLI prints, environment
first.  No figure is asserted anywhere: the tests check that each bench runs
and prints well-formed figures, not how fast this machine is.

One module per anchor: sockperf.py (rtt), iperf3.py (upload, iperf3_ceiling),
ev_bench.py (events, event_cost), echo.py (the lab's own: throughput, scaling), known_answer.py
(queueing theory), replications.py (a run's interval against replications);
common.py holds what they share.  Every process starts through labkit.launcher
(the lab's load generator through procs.run_load), and saved rows go through
labkit.store, as the sweeps' do.
"""

from __future__ import annotations

from . import common, echo, ev_bench, iperf3, known_answer, replications, sockperf
from .common import RESULTS_DIR, RTT_SIZE, free_port, pinning
from .echo import SCALING_TARGET, format_scaling, format_throughput, scaling, scaling_plan, throughput
from .ev_bench import BACKENDS, event_cost, events, format_events
from .iperf3 import (IPERF3_INSTALL, UPLOAD_MODELS, UPLOAD_TARGET, Iperf3Server, format_upload, iperf3_ceiling,
                     iperf3_path, upload)
from .sockperf import RTT_TARGET, SOCKPERF_INSTALL, find_sockperf, format_rtt, parse_sockperf, rtt, sockperf_path

__all__ = ["BACKENDS", "IPERF3_INSTALL", "Iperf3Server", "RESULTS_DIR", "RTT_SIZE", "RTT_TARGET", "SCALING_TARGET",
           "SOCKPERF_INSTALL", "UPLOAD_MODELS", "UPLOAD_TARGET", "common", "echo", "ev_bench", "event_cost", "events",
           "find_sockperf", "format_events", "format_rtt", "format_scaling", "format_throughput", "format_upload",
           "free_port", "iperf3", "iperf3_ceiling", "iperf3_path", "parse_sockperf", "pinning", "rtt",
           "run_command", "scaling", "scaling_plan", "sockperf", "sockperf_path", "throughput", "upload"]


def run_command(args) -> str:
    """`labkit bench rtt | throughput | events | upload | scaling | queueing | replications` (the parser lives
    in cli.py):
    run the bench `args.bench` names; return the text to print."""
    import sys

    server_cpus, client_cpus = args.server_cpus, args.client_cpus
    if args.bench == "rtt":
        use_sockperf = sockperf.find_sockperf() is not None
        if not use_sockperf:
            print(f"note: sockperf is not installed, so only the lab's round trip is measured; "
                  f"install it: {SOCKPERF_INSTALL}", file=sys.stderr)
        return format_rtt(rtt(rounds=args.rounds, seconds=args.seconds or 2, exchanges=args.exchanges,
                              engine=args.engine, server_cpus=server_cpus, client_cpus=client_cpus,
                              use_sockperf=use_sockperf))
    if args.bench == "scaling":
        return format_scaling(scaling(model=args.model, workers=args.workers, clients=args.clients or 400,
                                      requests=args.requests or 2000, rounds=args.rounds))
    if args.bench == "upload":
        return format_upload(upload(rounds=args.rounds, seconds=args.seconds or 2, server_cpus=server_cpus,
                                    client_cpus=client_cpus))
    if args.bench == "queueing":
        return known_answer.format_calibration(known_answer.calibrate(
            duration=args.seconds or known_answer.DURATION, replications=args.replications or known_answer.REPLICATIONS,
            server_cpus=server_cpus, client_cpus=client_cpus))
    if args.bench == "replications":
        return replications.format_replications(replications.replicate(
            replications=args.replications or replications.REPLICATIONS, duration=args.seconds or replications.DURATION,
            server_cpus=server_cpus, client_cpus=client_cpus))
    if args.bench == "throughput":
        return format_throughput(throughput(models=args.models, clients=args.clients or 100,
                                            requests=args.requests or 200,
                                            server_cpus=server_cpus, client_cpus=client_cpus))
    return format_events(events(descriptors=args.descriptors, active=args.active, writes=args.writes,
                                runs=args.runs))
