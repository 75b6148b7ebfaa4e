"""The experiment catalogue: each experiment's parameters, profiles and grid.

A profile is a set of defaults: "full" is the experiment as the course runs
it, "quick" is small enough that its notebook runs in about a minute on two
cores (papermill tests, grading).  Any parameter given explicitly wins over
the profile; a given value of None means "the profile's default".
"""

from __future__ import annotations

import resource
from dataclasses import dataclass, field

from .errors import LabError

# Computed when resolved, from the machine the lab runs on.
FROM_MACHINE = "from the machine"


@dataclass(frozen=True)
class Experiment:
    name: str
    title: str
    parameters: dict  # name -> default (the full profile)
    profiles: dict = field(default_factory=dict)  # profile -> {name: default overriding `parameters`}
    help: dict = field(default_factory=dict)  # name -> one line for widgets and --help
    # The parameters that are lists and span the grid (one point per combination),
    # with the measure.point argument each becomes; every other parameter named in
    # `fixed` is passed to every point as it is.
    axes: dict = field(default_factory=lambda: {"models": "model", "clients": "clients"})
    fixed: dict = field(default_factory=dict)  # parameter -> measure.point argument


_CPUS_HELP = {
    "server_cpus": "CPUs the server is pinned to",
    "client_cpus": "CPUs the load generator is pinned to",
}

PROC_TOP = Experiment(
    name="proc_top",
    title="Top-CPU /proc service: iterative vs thread per connection vs select",
    parameters={
        "models": ["iterative", "threaded", "select"],
        "clients": [10, 50, 100],
        "requests": 1,  # the seeds' client sends one request per connection
        "repeats": 3,
        "k": 2,
        "service": "top",
        "server_cpus": FROM_MACHINE,
        "client_cpus": FROM_MACHINE,
    },
    profiles={
        "full": {},
        "quick": {"clients": [10, 50], "repeats": 1},
    },
    help={
        "models": "server concurrency models to compare",
        "clients": "numbers of concurrent clients (the seeds used 3, 6, 10)",
        "requests": "requests each client sends on its connection",
        "repeats": "measurements per point (median and spread are shown)",
        "k": "how many top processes each reply lists",
        "service": "the service the server runs",
        **_CPUS_HELP,
    },
    fixed={"requests": "requests", "service": "service", "k": "k",
           "server_cpus": "server_cpus", "client_cpus": "client_cpus"},
)

# Every readiness model and every model with workers (not the iterative one,
# which would serve 10,000 clients one after the other).
SCALE_MODELS = ["threaded", "select", "poll", "epoll", "epoll_et", "uring",
                "select_fork", "epoll_workers", "pool", "prefork", "fork"]

ECHO_SCALE = Experiment(
    name="echo_scale",
    title="Echo at scale (seed 003): every readiness and worker model, thousands of clients",
    parameters={
        "models": SCALE_MODELS,
        "clients": [5000, 10000],  # seed 003's grid: 5k and 10k clients x 200 and 300 exchanges
        "exchanges": [200, 300],
        "size": 64,  # seed 003's client sends a message given on its command line; it never says how long
        "workers": None,  # None: the server's default, one per usable CPU
        "repeats": 3,
        "service": "echo",
        "engine": "events",
        "server_cpus": FROM_MACHINE,
        "client_cpus": FROM_MACHINE,
    },
    profiles={
        "full": {},
        "quick": {"models": ["threaded", "select", "poll", "epoll", "epoll_workers"],
                  "clients": [500, 2000], "exchanges": [20], "repeats": 1},
    },
    help={
        "models": "server concurrency models to compare",
        "clients": "concurrent connections, all open at once (seed 003: 5000, 10000)",
        "exchanges": "echo round trips per connection (seed 003: 200, 300)",
        "size": "bytes per message",
        "workers": "processes or threads for the worker models (empty: one per CPU)",
        "repeats": "measurements per point (median and spread are shown)",
        "service": "the service the server runs",
        "engine": "load generator engine (events: one process for 10,000 connections)",
        **_CPUS_HELP,
    },
    axes={"models": "model", "clients": "clients", "exchanges": "requests"},
    fixed={"size": "size", "workers": "workers", "service": "service", "engine": "engine",
           "server_cpus": "server_cpus", "client_cpus": "client_cpus"},
)

IDLE_CONNS = Experiment(
    name="idle_conns",
    title="Idle connections: a fixed active load beside 0 to 10,000 silent ones (select, poll, epoll)",
    parameters={
        "models": ["select", "poll", "epoll"],
        "idle": [0, 500, 1000, 2000, 5000, 10000],  # 500: select still fits under FD_SETSIZE
        "clients": [100],  # the active connections
        "rate": 5000,  # open loop: requests per second over all active connections
        "duration": 4,
        "warmup": "1s",
        "size": 64,
        "repeats": 3,
        "service": "echo",
        "engine": "events",
        "server_cpus": FROM_MACHINE,
        "client_cpus": FROM_MACHINE,
    },
    profiles={
        "full": {},
        "quick": {"idle": [0, 1000], "duration": 1, "warmup": "0.2s", "repeats": 1},
    },
    help={
        "models": "readiness models to compare",
        "idle": "silent connections held open beside the active ones",
        "clients": "active connections",
        "rate": "requests per second in total (open loop, latency from each request's due time)",
        "duration": "seconds of load per point",
        "warmup": "left out of the latency figures: '1s' or a count of exchanges",
        "size": "bytes per message",
        "repeats": "measurements per point (median and spread are shown)",
        "service": "the service the server runs",
        "engine": "load generator engine",
        **_CPUS_HELP,
    },
    axes={"models": "model", "idle": "idle", "clients": "clients"},
    fixed={"rate": "rate", "duration": "duration", "warmup": "warmup", "size": "size",
           "service": "service", "engine": "engine",
           "server_cpus": "server_cpus", "client_cpus": "client_cpus"},
)

CATALOGUE = {experiment.name: experiment for experiment in (PROC_TOP, ECHO_SCALE, IDLE_CONNS)}

# Parameters of a proc_top grid point, passed on to measure.point.
POINT_PARAMETERS = ("model", "clients", "requests", "service", "k", "server_cpus", "client_cpus")


def get(name: str) -> Experiment:
    try:
        return CATALOGUE[name]
    except KeyError:
        raise LabError(f"unknown experiment {name!r}",
                       f"choose one of: {', '.join(sorted(CATALOGUE))}") from None


def resolve(name: str, profile: str = "full", **given) -> dict:
    """The parameters of `name` under `profile`, with `given` values overriding (None = default)."""
    experiment = get(name)
    if profile not in experiment.profiles:
        raise LabError(f"unknown profile {profile!r} for {name}",
                       f"choose one of: {', '.join(experiment.profiles)}")
    unknown = sorted(set(given) - set(experiment.parameters))
    if unknown:
        raise LabError(f"{name} has no parameter {', '.join(unknown)}",
                       f"its parameters are: {', '.join(experiment.parameters)}")
    params = {**experiment.parameters, **experiment.profiles[profile]}
    params.update({key: value for key, value in given.items() if value is not None})
    params = _validate(params)
    params["experiment"] = name
    params["profile"] = profile
    return params


def _as_list(value) -> list:
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, str):
        return [part for part in value.replace(",", " ").split() if part]
    return [value]


def _as_int(name: str, value) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise LabError(f"{name} must be a whole number, got {value!r}", f"give {name} as e.g. 3") from None
    if number != value and not isinstance(value, str):
        raise LabError(f"{name} must be a whole number, got {value!r}", f"give {name} as e.g. 3")
    return number


def _as_number(name: str, value) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise LabError(f"{name} must be a number, got {value!r}", f"give {name} as e.g. 2.5") from None
    if not number > 0:
        raise LabError(f"{name} must be above 0, got {value!r}", f"set {name} above 0")
    return number


# Whole-number parameters and their smallest allowed value, wherever an experiment has them.
_WHOLE = {"requests": 1, "repeats": 1, "k": 1, "size": 1, "workers": 1}
_WHOLE_LISTS = {"clients": 1, "exchanges": 1, "idle": 0}
_LIST_WORDS = {"clients": ("client count", "clients"), "exchanges": ("exchange count", "exchanges"),
               "idle": ("idle count", "idle connections")}


def _validate(params: dict) -> dict:
    from . import build, system

    known = build.models()
    models = _as_list(params["models"])
    if not models:
        raise LabError("no server model chosen", f"choose one or more of: {', '.join(known)}")
    for model in models:
        if model not in known:
            raise LabError(f"unknown server model {model!r}", f"choose from: {', '.join(known)}")
    params["models"] = models

    for name, least in _WHOLE_LISTS.items():
        if name not in params:
            continue
        values = [_as_int(name, v) for v in _as_list(params[name])]
        if not values:
            raise LabError(f"no {name} chosen", f"give one or more values for {name}, e.g. [10, 50, 100]")
        for value in values:
            if value < least:
                what, unit = _LIST_WORDS[name]
                raise LabError(f"{what} {value} is below {least}", f"use {least} or more {unit}")
        params[name] = values
    _check_open_files(params["clients"], params.get("idle", [0]))

    for name, least in _WHOLE.items():
        if name not in params or (name == "workers" and params[name] in (None, "")):
            continue
        params[name] = _as_int(name, params[name])
        if params[name] < least:
            raise LabError(f"{name} must be at least {least}, got {params[name]}", f"set {name} to {least} or more")
    for name in ("rate", "duration"):
        if name in params:
            params[name] = _as_number(name, params[name])
    if "warmup" in params:
        params["warmup"] = _warmup(params["warmup"])

    if FROM_MACHINE in (params["server_cpus"], params["client_cpus"]):
        server_default, client_default, note = system.default_pinning()
        if params["server_cpus"] == FROM_MACHINE:
            params["server_cpus"] = server_default
        if params["client_cpus"] == FROM_MACHINE:
            params["client_cpus"] = client_default
    else:
        note = ""
    params["server_cpus"] = sorted(_as_int("server_cpus", c) for c in _as_list(params["server_cpus"]))
    params["client_cpus"] = sorted(_as_int("client_cpus", c) for c in _as_list(params["client_cpus"]))
    system.check_cpus(params["server_cpus"])
    system.check_cpus(params["client_cpus"])
    shared = sorted(set(params["server_cpus"]) & set(params["client_cpus"]))
    if shared:
        if len(system.usable_cpus()) > 1:
            raise LabError(
                f"server CPUs {params['server_cpus']} and client CPUs {params['client_cpus']} overlap on {shared}",
                "pin the server and the client to different CPUs, e.g. server_cpus=[0], client_cpus=[1]",
            )
        note = note or ("only one CPU: server and client share it, so the client's work "
                        "is counted against the server's time")
    params["pinning_note"] = note
    return params


def _warmup(value) -> str:
    """loadgen's --warmup: seconds with an 's' ('1s', '0.5s') or a count of exchanges ('1000')."""
    text = str(value).strip()
    number = text[:-1] if text.endswith("s") else text
    try:
        ok = float(number) >= 0 and (text.endswith("s") or number.isdigit())
    except ValueError:
        ok = False
    if not ok:
        raise LabError(f"warmup must be seconds like '1s' or a count like '1000', got {value!r}",
                       "write the seconds with an s: warmup = \"1s\"")
    return text


def _check_open_files(clients: list[int], idle: list[int]) -> None:
    """Refuse up front a point the hard open-file limit cannot hold, saying what fits."""
    from . import system
    from .procs import FD_MARGIN

    # The soft limit is raised before the run (procs.ensure_nofile); only the hard one refuses.
    hard = system.nofile_limit()[1]
    hard = hard if hard != resource.RLIM_INFINITY else 1 << 20
    most_idle = max(idle)
    for count in clients:
        want = count + most_idle + FD_MARGIN
        if want <= hard:
            continue
        if most_idle:
            raise LabError(
                f"{count} clients + {most_idle} idle connections need about {want} open files; "
                f"this machine allows {hard}",
                f"use at most {max(hard - FD_MARGIN - count, 0)} idle connections beside {count} clients, "
                "or raise the limit (`ulimit -n`, /etc/security/limits.conf)",
            )
        raise LabError(
            f"{count} clients need about {want} open files; this machine allows {hard}",
            f"use at most {hard - FD_MARGIN} clients, or raise the limit (`ulimit -n`, /etc/security/limits.conf)",
        )


def grid(params: dict) -> list[dict]:
    """One measure.point kwargs dict per combination of the experiment's axes
    (for proc_top: model x clients), in the order the axes are listed."""
    import itertools

    experiment = get(params.get("experiment", "proc_top"))
    axes = list(experiment.axes.items())
    fixed = {argument: _copy(params[name]) for name, argument in experiment.fixed.items()}
    points = []
    for values in itertools.product(*(params[name] for name, _ in axes)):
        point = {argument: value for (_, argument), value in zip(axes, values)}
        points.append({**point, **fixed})
    return points


def _copy(value):
    return list(value) if isinstance(value, list) else value
