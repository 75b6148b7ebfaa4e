"""labkit.params: each parameter kind checks a value, makes its panel field and reads it back."""

import os

import pytest

from labkit import build
from labkit.errors import LabError
from labkit.params import FROM_MACHINE, Choice, Cpus, Int, IntList, Models, Number, Warmup

CPUS = sorted(os.sched_getaffinity(0))


@pytest.mark.parametrize("kind, given, expected", [
    (Models(), "select, epoll", ["select", "epoll"]),
    (Models(), ["poll"], ["poll"]),
    (IntList(least=0), "0,500 1000", [0, 500, 1000]),
    (IntList(), [10, 50.0], [10, 50]),
    (Int(least=1), "3", 3),
    (Int(optional=True), "", None),
    (Int(optional=True), None, None),
    (Number(), "2.5", 2.5),
    (Choice("events", "threads"), "threads", "threads"),
    (Warmup(), "0.5s", "0.5s"),
    (Warmup(), "1000", "1000"),
    (Cpus(), FROM_MACHINE, FROM_MACHINE),
    (Cpus(), str(CPUS[-1]), [CPUS[-1]]),
])
def test_check_normalises_what_a_notebook_the_cli_or_a_field_gives(kind, given, expected):
    assert kind.check("p", given) == expected


@pytest.mark.parametrize("kind, given, says", [
    (Models(), [], "no server model chosen"),
    (Models(), "nosuch", "unknown server model 'nosuch'"),
    (IntList(least=1, noun="client count", unit="clients"), [0], "client count 0 is below 1"),
    (IntList(), "", "no p chosen"),
    (IntList(), [2.5], "p must be a whole number"),
    (Int(least=1), 0, "p must be at least 1"),
    (Int(), True, "p must be a whole number"),
    (Number(), 0, "p must be above 0"),
    (Number(), "fast", "p must be a number"),
    (Choice("echo"), "top", "p must be one of echo"),
    (Warmup(), "1.5", "p must be seconds like '1s'"),
    (Cpus(), [4096], "CPU 4096 is not usable"),
])
def test_a_bad_value_says_what_to_give_instead(kind, given, says):
    with pytest.raises(LabError) as caught:
        kind.check("p", given)
    assert says in caught.value.what and caught.value.fix


@pytest.mark.parametrize("kind, value, shown", [
    (Models(), ["select", "epoll"], ["epoll", "select"]),  # the fields list models in build order (sorted)
    (IntList(least=0), [0, 1000], [0, 1000]),
    (Int(least=1), 4, 4),
    (Int(optional=True, empty="one per CPU"), None, None),
    (Int(optional=True), 2, "2"),
    (Number(), 100.0, 100.0),
    (Choice("events", "threads"), "threads", "threads"),
    (Warmup(), "0.2s", "0.2s"),
    (Cpus(), [0], "0"),
])
def test_the_widget_shows_a_value_and_reads_back_what_resolves_to_it(kind, value, shown):
    widget = kind.widget(value)
    assert kind.read(widget) == shown
    assert kind.check("p", kind.read(widget)) == kind.check("p", value) or isinstance(kind, Models)
    other = kind.widget(value)
    kind.show(other, value)
    assert kind.read(other) == shown


def test_the_models_field_has_a_box_for_every_model_this_checkout_builds():
    widget = Models().widget(["select"])
    assert [box.description for box in widget.children] == build.models()
    Models().show(widget, ["poll", "epoll"])
    assert Models().read(widget) == [m for m in build.models() if m in ("poll", "epoll")]


def test_every_default_is_written_as_it_is_typed_back():
    """`labkit experiments NAME` and the panel show each default (and quick value) as a user types
    it (Kind.typed); checked again by its own kind, it is the same value: 16GB, 15x100, on."""
    from labkit import experiments

    for experiment in experiments.catalogue().values():
        for param in experiment.parameters:
            quick = experiment.profiles.get("quick", {})
            for value in [param.default] + ([quick[param.name]] if param.name in quick else []):
                if value is None:
                    continue
                typed = (",".join(param.kind.typed(v) for v in value) if isinstance(value, (list, tuple))
                         else param.kind.typed(value))
                back = param.kind.check(param.name, typed)
                assert (list(back) if isinstance(value, (list, tuple)) else back) == (
                    list(value) if isinstance(value, (list, tuple)) else value), (experiment.name, param.name, typed)


# ---------------------------------------------------------------------------
# the load generator's limits: declared once, in C (loadgen --describe)

def _generator_refuses(flag: str, value) -> str:
    """What the load generator says to `--flag value` (exit 2: bad arguments)."""
    import subprocess

    base = {"port": "9", "clients": "1", "requests": "1"}
    base[flag] = str(value)
    argv = [str(build.binary(build.LOADGEN))] + [word for key, v in base.items() for word in (f"--{key}", v)]
    if flag in ("rate", "duration", "threads", "idle"):
        argv += ["--engine", "events"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    assert done.returncode == 2, (argv, done.returncode, done.stderr)
    return done.stderr


@pytest.mark.parametrize("flag", ["clients", "requests", "size", "threads", "idle", "rate", "timeout",
                                  "connect-timeout", "duration", "nbufs", "bufsize"])
def test_each_declared_limit_is_the_one_the_generator_enforces(flag):
    bound = build.loadgen_limits()["flags"][flag]
    over = bound["max"] * 2 if isinstance(bound["max"], float) else bound["max"] + 1
    assert f"--{flag}" in _generator_refuses(flag, over)


@pytest.mark.parametrize("experiment, given, says", [
    ("idle_conns", dict(rate=2e7), "rate 20,000,000.0 is outside what the load generator takes for --rate"),
    ("idle_conns", dict(duration=4000), "takes for --duration: more than 0 to 3,600"),
    ("uploads", dict(size=["300MB"]), "the size 300MB in size is outside 1B to 256MB"),
    ("write_strategies", dict(shape=["2000x10"]), "2000x10 in shape is outside the load generator's caps"),
])
def test_value_past_generator_limit_refused(experiment, given, says):
    """A value past the generators limit is refused before anything runs."""
    from labkit import experiments

    with pytest.raises(LabError, match=says.replace("(", r"\(").replace(")", r"\)")):
        experiments.get(experiment).resolve("quick", **given)
