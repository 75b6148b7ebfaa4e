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
        "server_cpus": "CPUs the server is pinned to",
        "client_cpus": "CPUs the load generator is pinned to",
    },
)

CATALOGUE = {experiment.name: experiment for experiment in (PROC_TOP,)}

# Parameters of a grid point, passed on to measure.point.
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

    clients = [_as_int("clients", c) for c in _as_list(params["clients"])]
    if not clients:
        raise LabError("no client count chosen", "give one or more client counts, e.g. [10, 50, 100]")
    from .procs import FD_MARGIN

    # The soft limit is raised before the run (procs.ensure_nofile); only the hard one refuses.
    hard = system.nofile_limit()[1]
    hard = hard if hard != resource.RLIM_INFINITY else 1 << 20
    for count in clients:
        if count < 1:
            raise LabError(f"client count {count} is below 1", "use 1 or more clients")
        if count + FD_MARGIN > hard:
            raise LabError(
                f"{count} clients need about {count + FD_MARGIN} open files; this machine allows {hard}",
                f"use at most {hard - FD_MARGIN} clients, or raise the limit (`ulimit -n`, /etc/security/limits.conf)",
            )
    params["clients"] = clients

    for name in ("requests", "repeats", "k"):
        params[name] = _as_int(name, params[name])
        if params[name] < 1:
            raise LabError(f"{name} must be at least 1, got {params[name]}", f"set {name} to 1 or more")

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


def grid(params: dict) -> list[dict]:
    """One measure.point kwargs dict per model x clients."""
    return [
        {
            "model": model,
            "clients": clients,
            "requests": params["requests"],
            "service": params["service"],
            "k": params["k"],
            "server_cpus": list(params["server_cpus"]),
            "client_cpus": list(params["client_cpus"]),
        }
        for model in params["models"]
        for clients in params["clients"]
    ]
