"""The lab's ground truth: a server whose cost per request is known, held against queueing
theory.

The `spin` service keeps the server's CPU busy for the time each request declares
(`SPIN <us>`, csrc/services/spin.c); the load generator draws that time from a declared
distribution (`spin_dist`: fixed, or exponential of mean `spin_us`) and offers the
requests in an open loop at `rate`, evenly spaced or as a Poisson process (`arrivals`).
A server with one thread (epoll: one event loop) is then a single-server queue: M/D/1
or M/M/1 with Poisson arrivals, D/D/1 or D/M/1 with even ones, at utilisation
rho = rate x mean service time.  labkit.queue_theory predicts each point's mean and p99
response time from the same declared quantities and what the lab measured of itself:
the loop's own cost per request (SPIN 0) and the round trip outside the server.  Where
the measurement departs from the prediction, the departure is the lab's measurement
floor, named (`labkit bench queueing` prints the table)."""

from labkit.experiments import Experiment, Figure
from labkit.params import (BOTH, SERVER, Choice, ChoiceList, Int, IntList, Models, Number, Param, Warmup,
                           arrivals_param, cpu_params, placement_params, repeats_param)

EXPERIMENT = Experiment(
    name="service_time",
    title="A known service time against queueing theory (M/D/1, M/M/1): the lab's measurement floor",
    parameters=(
        Param("models", Models(), ["epoll"], "server models (one thread: a single-server queue)", to=SERVER),
        Param("rate", IntList(least=1, noun="offered rate", unit="requests per second"), [2000, 3500, 5000],
              "requests per second offered (open loop); with spin_us 100 and a loop that costs 35 us a request "
              "(a 2-core VM), utilisation 0.27, 0.47 and 0.68", label="offered rate (requests/s)"),
        arrivals_param(("even", "poisson")),
        Param("spin_dist", ChoiceList("fixed", "exp"), ["fixed", "exp"],
              "each request's service time: spin_us exactly (fixed), or drawn from the exponential "
              "distribution of mean spin_us (exp)", flag="spin-dist", label="service time"),
        Param("spin_us", Int(least=0), 100, "the mean service time per request, microseconds",
              flag="spin-us"),
        Param("clients", IntList(least=1, noun="client count", unit="clients"), [20],
              "connections the offered requests are spread over", label="connections"),
        Param("duration", Number(), 4, "seconds each point is offered"),
        Param("warmup", Warmup(), "0.5s", "left out of the figures: '0.5s' or a count of exchanges"),
        repeats_param(3),
        Param("service", Choice("spin"), "spin", "the service the server runs", to=BOTH, fixed=True),
        Param("engine", Choice("events"), "events", "load generator engine (open loop)", fixed=True),
        *cpu_params(),
        *placement_params(),
    ),
    x="rate",
    profiles={"quick": {"rate": [2000, 5000], "spin_dist": ["exp"], "duration": 0.5,
                        "warmup": "0.1s", "repeats": 1}},
    figures=(
        Figure("lat_mean_us"), Figure("lat_p99_us"), Figure("lat_p50_us"), Figure("completed_rps"),
        Figure("server_cpu_us_per_request"), Figure("inflight_mean"),
    ),
)
