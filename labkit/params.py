"""Parameter kinds: each written once, with its check, its panel widget and its read-back.

An experiment declares its parameters as Param(name, kind, default, help, to=...);
everything else follows from the kind:
  * check(name, value)   the value a notebook, `--set name=text` or a panel
                         field gave, normalised, or a LabError saying what to
                         give instead;
  * widget(value)        the panel's field for it; read(widget) gives back the
                         raw value a student entered, show(widget, value) fills it;
  * is_list              list kinds span the experiment's grid (one point per value).
`to` says where the value goes at each grid point: the server (a flag of the
server model), the load generator (one of its flags), both, the pinning, or
the sweep itself (repeats).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import LabError

# Where a parameter's value goes at each grid point (LINK: the link between server and
# client, labkit.netlink, when they are placed in namespaces).
SERVER, LOAD, BOTH, PINNING, SWEEP, LINK = "server", "load", "both", "pinning", "sweep", "link"

# A CPU set's default: computed when resolved, from the machine the lab runs on.
FROM_MACHINE = "from the machine"


def _words(value) -> list:
    """A list as given: a list or tuple, or text separated by commas or spaces."""
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, str):
        return [part for part in value.replace(",", " ").split() if part]
    return [value]


def whole_number(name: str, value) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise LabError(f"{name} must be a whole number, got {value!r}", f"give {name} as e.g. 3") from None
    if isinstance(value, bool) or (number != value and not isinstance(value, str)):
        raise LabError(f"{name} must be a whole number, got {value!r}", f"give {name} as e.g. 3")
    return number


class Kind:
    """What every parameter kind provides (see the module's docstring)."""

    is_list = False

    def check(self, name: str, value):
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError

    def widget(self, value):
        import ipywidgets as w

        return w.Text(value="" if value is None else str(value))

    def read(self, widget):
        return widget.value

    def show(self, widget, value) -> None:
        widget.value = "" if value is None else str(value)

    def sort_key(self, value):
        """Where a value goes in a table's rows (its own order, unless the kind says)."""
        return value

    # what no value (None) means, as text
    none_text = "default"

    def text(self, value) -> str:
        """One value as a plot's tick or legend shows it."""
        if value is None:
            return self.none_text
        return f"{value:,}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)

    def typed(self, value) -> str:
        """One value as a user types it back (labkit sweep --set, a panel field): 20000, 16GB, on."""
        return self.text(value).replace(",", "")


class ChoiceList(Kind):
    """Some of a few words, one grid point each (write strategies: many, writev, single):
    a checkbox for each."""

    is_list = True
    noun = "value"

    def __init__(self, *options: str):
        self._options = options

    @property
    def options(self) -> list[str]:
        return list(self._options)

    def check(self, name, value):
        known = self.options
        chosen = [str(v) for v in _words(value)]
        if not chosen:
            raise LabError(f"no {self.noun} chosen for {name}", f"choose one or more of: {', '.join(known)}")
        for word in chosen:
            if word not in known:
                raise LabError(f"unknown {self.noun} {word!r} for {name}", f"choose from: {', '.join(known)}")
        return chosen

    def describe(self):
        return f"one or more of {', '.join(self.options)}"

    def widget(self, value):
        import ipywidgets as w

        boxes = [w.Checkbox(value=o in value, description=o, indent=False, layout=w.Layout(width="auto"))
                 for o in self.options]
        # a dozen models: let the checkboxes wrap instead of running off the panel
        return w.HBox(boxes, layout=w.Layout(flex_flow="row wrap", max_width="560px", grid_gap="0 12px"))

    def read(self, widget):
        return [box.description for box in widget.children if box.value]

    def sort_key(self, value):
        """In the order the options are declared (same_host before namespaces), unknown last."""
        options = self.options
        return (options.index(value), "") if value in options else (len(options), str(value))

    def show(self, widget, value):
        for box in widget.children:
            box.value = box.description in value


class Models(ChoiceList):
    """Server models to compare: a checkbox for each model this checkout builds."""

    column = "model"  # a grid point holds one of them, as "model"
    noun = "server model"

    def __init__(self):
        super().__init__()

    @property
    def options(self) -> list[str]:
        from . import build

        return build.models()

    def describe(self):
        return "server models, e.g. select,epoll"


class IntList(Kind):
    """Whole numbers, one grid point each (clients: [10, 50, 100])."""

    is_list = True

    def __init__(self, least: int = 1, noun: str = "", unit: str = "", most: int | None = None):
        self.least = least
        self.most = most
        self.noun = noun  # "client count": for "client count 0 is below 1"
        self.unit = unit  # "clients": for "use 1 or more clients"

    def check(self, name, value):
        values = [whole_number(name, v) for v in _words(value)]
        if not values:
            raise LabError(f"no {name} chosen", f"give one or more values for {name}, e.g. [10, 50, 100]")
        for number in values:
            if number < self.least:
                raise LabError(f"{self.noun or name} {number} is below {self.least}",
                               f"use {self.least} or more {self.unit or name}")
            if self.most is not None and number > self.most:
                raise LabError(f"{self.noun or name} {number} is above {self.most}",
                               f"use at most {self.most} {self.unit or name}")
        return values

    def describe(self):
        most = f" and <= {self.most}" if self.most is not None else ""
        return f"whole numbers >= {self.least}{most}, e.g. 10,50"

    def widget(self, value):
        import ipywidgets as w

        # A text box like every other list field ("10, 50"): ipywidgets' IntsInput hides its
        # text box once it holds tags, and its frontend drops a value out of range without
        # a word; check() says what is wrong instead, under the field.
        return w.Text(value=", ".join(str(v) for v in value), placeholder="e.g. 10, 50, 100")

    def read(self, widget):
        """The numbers typed, as numbers; anything else as typed, for check() to name."""
        return [int(word) if word.lstrip("-").isdigit() else word for word in _words(widget.value)]

    def show(self, widget, value):
        widget.value = ", ".join(str(v) for v in _words(value))


# Byte units: binary, as the seed's clients counted (1 KB = 1024 bytes).
SIZE_UNITS = {"B": 1, "KB": 1024, "KIB": 1024, "MB": 1024 ** 2, "MIB": 1024 ** 2, "GB": 1024 ** 3, "GIB": 1024 ** 3}


def parse_size(name: str, value) -> int:
    """'10MB' -> 10485760.  A bare number is refused: is 10 ten bytes or ten megabytes?"""
    text = str(value).strip().upper().replace(" ", "")
    number = text.rstrip("KMGIB")
    unit = text[len(number):]
    example = f"give {name} with a unit, e.g. 100KB or 10MB (1 KB = 1024 bytes)"
    if isinstance(value, bool) or not number or unit not in SIZE_UNITS:
        why = ("has no number" if not number else "has no unit" if not unit
               else f"has the unit {unit!r}, none of B, KB, MB, GB")
        raise LabError(f"the size {value!r} in {name} {why}", example)
    try:
        size = float(number) * SIZE_UNITS[unit]
    except ValueError:
        raise LabError(f"the size {value!r} in {name} is not a number with a unit", example) from None
    if size != int(size) or size < 0:
        raise LabError(f"the size {value!r} in {name} is not a whole number of bytes", example)
    return int(size)


def size_text(size: int) -> str:
    """10485760 -> '10MB', 1536 -> '1.5KB': the shortest exact form."""
    for unit in ("GB", "MB", "KB"):
        scaled = size / SIZE_UNITS[unit]
        if scaled >= 1 and scaled * 10 == int(scaled * 10):
            return f"{scaled:g}{unit}"
    return f"{size}B"


class Sizes(Kind):
    """Byte sizes with units ('1KB, 10MB'), one grid point each; held as bytes."""

    is_list = True

    def __init__(self, least: int = 1, most: int | None = None):
        self.least = least
        self.most = most  # None: the load generator's largest body (its --describe says)

    def check(self, name, value):
        sizes = [v if isinstance(v, int) and not isinstance(v, bool) else parse_size(name, v)
                 for v in _words(value)]
        if not sizes:
            raise LabError(f"no {name} chosen", f"give one or more sizes for {name}, e.g. 1KB, 10MB")
        most = self.most
        if most is None:
            from .build import loadgen_limits

            most = loadgen_limits()["flags"]["size"]["max"]
        for size in sizes:
            if not self.least <= size <= most:
                raise LabError(f"the size {size_text(size)} in {name} is outside {size_text(self.least)} "
                               f"to {size_text(most)}",
                               f"use sizes from {size_text(self.least)} to {size_text(most)}, "
                               "e.g. 1KB, 100KB, 10MB")
        return sizes

    def describe(self):
        return "sizes with a unit, e.g. 1KB,10MB (1 KB = 1024 bytes)"

    def text(self, value):
        return size_text(int(value))

    def widget(self, value):
        import ipywidgets as w

        return w.Text(value=", ".join(size_text(v) if isinstance(v, int) else str(v) for v in value),
                      placeholder="e.g. 1KB, 100KB, 10MB")

    def show(self, widget, value):
        widget.value = ", ".join(size_text(v) if isinstance(v, int) else str(v) for v in _words(value))


class Size(Kind):
    """One byte size with a unit ('4GB'); held as bytes."""

    def check(self, name, value):
        size = value if isinstance(value, int) and not isinstance(value, bool) else parse_size(name, value)
        if size < 1:
            raise LabError(f"{name} must be at least 1 byte", f"give {name} like 4GB")
        return size

    def describe(self):
        return "a size with a unit, e.g. 4GB"

    def text(self, value):
        return size_text(int(value))

    def widget(self, value):
        import ipywidgets as w

        return w.Text(value=size_text(value) if isinstance(value, int) else str(value), placeholder="e.g. 4GB")

    def show(self, widget, value):
        widget.value = size_text(value) if isinstance(value, int) else str(value)


# seed 004's buffers: a repetition is N buffers of B bytes, written "NxB"; the caps are the
# load generator's own (build.loadgen_limits: `loadgen --describe`)

class Shapes(Kind):
    """Buffer shapes 'NxB' (N buffers of B bytes: '15x100, 100x15'), one grid point each."""

    is_list = True

    def check(self, name, value):
        if isinstance(value, str):  # "100 x 15" is one shape
            value = re.sub(r"\s*[xX]\s*", "x", value)
        shapes = [str(v).replace(" ", "").lower() for v in _words(value)]
        if not shapes:
            raise LabError(f"no {name} chosen", f"give one or more shapes for {name}, e.g. 15x100, 100x15")
        for shape in shapes:
            nbufs, _, bufsize = shape.partition("x")
            if not (nbufs.isdigit() and bufsize.isdigit()):
                raise LabError(f"{shape!r} in {name} is not N buffers x B bytes",
                               f"write each shape as NxB, e.g. {name} = \"15x100, 30x50\"")
            n, b = int(nbufs), int(bufsize)
            from .build import loadgen_limits

            limits = loadgen_limits()
            most_n, most_b = limits["flags"]["nbufs"]["max"], limits["flags"]["bufsize"]["max"]
            most_bytes = limits["repetition_bytes_max"]
            if not (1 <= n <= most_n and 1 <= b <= most_b and n * b <= most_bytes):
                raise LabError(f"{shape} in {name} is outside the load generator's caps",
                               f"use 1 to {most_n} buffers of 1 to {most_b} bytes, at most "
                               f"{most_bytes} bytes in all, e.g. 15x100")
        return shapes

    def describe(self):
        return "buffer shapes NxB, e.g. 15x100,100x15"

    def widget(self, value):
        import ipywidgets as w

        return w.Text(value=", ".join(_words(value)), placeholder="e.g. 15x100, 100x15")

    def show(self, widget, value):
        widget.value = ", ".join(str(v) for v in _words(value))

    def text(self, value):
        nbufs, _, bufsize = str(value).partition("x")
        return f"{nbufs} x {bufsize} B"

    def typed(self, value):
        return str(value)

    def sort_key(self, value):
        nbufs, _, bufsize = str(value).partition("x")
        return int(nbufs), int(bufsize)  # 15x100 before 100x15


class Int(Kind):
    """One whole number; optional=True lets it be empty (None: the server's own default)."""

    def __init__(self, least: int = 1, optional: bool = False, empty: str = ""):
        self.least = least
        self.optional = optional
        self.empty = empty  # what an empty field means, shown as its placeholder
        self.none_text = empty or Kind.none_text

    def check(self, name, value):
        if self.optional and (value is None or (isinstance(value, str) and not value.strip())):
            return None
        number = whole_number(name, value)
        if number < self.least:
            raise LabError(f"{name} must be at least {self.least}, got {number}",
                           f"set {name} to {self.least} or more")
        return number

    def describe(self):
        return f"a whole number >= {self.least}" + (" (empty: " + self.empty + ")" if self.optional else "")

    def widget(self, value):
        import ipywidgets as w

        if self.optional:
            return w.Text(value="" if value is None else str(value), placeholder=self.empty)
        return w.BoundedIntText(value=value, min=self.least, max=1_000_000)

    def read(self, widget):
        return (widget.value.strip() or None) if self.optional else widget.value

    def show(self, widget, value):
        widget.value = ("" if value is None else str(value)) if self.optional else value


class Number(Kind):
    """A number above 0 (a rate, a duration in seconds)."""

    def check(self, name, value):
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise LabError(f"{name} must be a number, got {value!r}", f"give {name} as e.g. 2.5") from None
        if not number > 0:
            raise LabError(f"{name} must be above 0, got {value!r}", f"set {name} above 0")
        return number

    def describe(self):
        return "a number above 0"

    def widget(self, value):
        import ipywidgets as w

        return w.BoundedFloatText(value=value, min=0.001, max=1e9)

    def show(self, widget, value):
        widget.value = float(value)


class Choice(Kind):
    """One of a few words (a service, a load generator engine)."""

    def __init__(self, *options: str):
        self.options = options

    def check(self, name, value):
        if value not in self.options:
            raise LabError(f"{name} must be one of {', '.join(self.options)}, got {value!r}",
                           f"set {name} to one of: {', '.join(self.options)}")
        return value

    def describe(self):
        return " | ".join(self.options)

    def widget(self, value):
        import ipywidgets as w

        return w.Dropdown(options=list(self.options), value=value)


class Flag(Kind):
    """On or off: a checkbox (papermill and the CLI also take "on"/"off", "yes"/"no", 1/0)."""

    WORDS = {"on": True, "yes": True, "true": True, "1": True, "off": False, "no": False, "false": False, "0": False}

    def check(self, name, value):
        if isinstance(value, bool):
            return value
        word = str(value).strip().lower()
        if word not in self.WORDS:
            raise LabError(f"{name} must be on or off, got {value!r}", f"set {name} to on or off (True or False)")
        return self.WORDS[word]

    def describe(self):
        return "on or off"

    def widget(self, value):
        import ipywidgets as w

        return w.Checkbox(value=bool(value), indent=False)

    def show(self, widget, value):
        widget.value = bool(value)

    def text(self, value) -> str:
        return "on" if value else "off"


class Warmup(Kind):
    """loadgen's --warmup: seconds with an 's' ('1s', '0.5s') or a count of exchanges ('1000')."""

    def check(self, name, value):
        text = str(value).strip()
        number = text[:-1] if text.endswith("s") else text
        try:
            ok = float(number) >= 0 and (text.endswith("s") or number.isdigit())
        except ValueError:
            ok = False
        if not ok:
            raise LabError(f"{name} must be seconds like '1s' or a count like '1000', got {value!r}",
                           f"write the seconds with an s: {name} = \"1s\"")
        return text

    def describe(self):
        return "seconds like 1s, or a count of exchanges like 1000"

    def widget(self, value):
        import ipywidgets as w

        return w.Text(value=str(value), placeholder="e.g. 1s or 1000")


class Cpus(Kind):
    """A set of CPU numbers ("0" or "0,1"); FROM_MACHINE until the pinning is resolved."""

    def check(self, name, value):
        from . import system

        if value == FROM_MACHINE:
            return value
        return sorted(system.check_cpus([whole_number(name, c) for c in _words(value)]))

    def describe(self):
        return "CPU numbers, e.g. 0 or 0,1"

    def widget(self, value):
        import ipywidgets as w

        return w.Text(value=cpu_text(value), placeholder="e.g. 0 or 0,1")

    def show(self, widget, value):
        widget.value = cpu_text(value)


def cpu_text(cpus) -> str:
    if isinstance(cpus, str):
        return cpus
    return ",".join(str(c) for c in cpus)


@dataclass(frozen=True)
class Param:
    """One parameter of an experiment.

    `to` is where its value goes (SERVER, LOAD, BOTH, PINNING, SWEEP) and
    `flag` the server's or load generator's flag it becomes (default: its
    name), so `Param("exchanges", IntList(), [200], to=LOAD, flag="requests")`
    becomes `loadgen --requests 200`.  A `fixed` parameter is the
    experiment's workload: the panel does not offer it."""

    name: str
    kind: Kind
    default: object
    help: str = ""
    to: str = LOAD
    flag: str | None = None
    fixed: bool = False
    label: str = ""  # a short axis title ("concurrent clients"); default: its name
    server_flag: str | None = None  # a LOAD parameter the server is told too (clients -> --expect)

    def __post_init__(self):
        if self.to not in (SERVER, LOAD, BOTH, PINNING, SWEEP, LINK):
            raise ValueError(f"parameter {self.name}: to={self.to!r} is none of server, load, both, pinning, sweep, "
                             "link")

    @property
    def column(self) -> str:
        """Its name in a grid point and a results row (models -> model)."""
        return getattr(self.kind, "column", self.name)

    @property
    def title(self) -> str:
        return self.label or self.name

    @property
    def flag_name(self) -> str:
        return self.flag or self.name


def cpu_params() -> tuple[Param, Param]:
    """server_cpus and client_cpus, as every experiment has them."""
    return (Param("server_cpus", Cpus(), FROM_MACHINE, "CPUs the server is pinned to", to=PINNING),
            Param("client_cpus", Cpus(), FROM_MACHINE, "CPUs the load generator is pinned to", to=PINNING))


class LinkRate(Kind):
    """A link's rate in tc's units ('100mbit', '1gbit'); empty: not shaped."""

    none_text = "not shaped"

    def check(self, name, value):
        if value is None or not str(value).strip():
            return None
        from .netlink import rate_bits

        rate_bits(str(value))
        return str(value).strip().lower()

    def describe(self):
        return "a rate like 100mbit or 1gbit (empty: as fast as the link goes)"

    def widget(self, value):
        import ipywidgets as w

        return w.Text(value=value or "", placeholder="e.g. 100mbit (empty: not shaped)")

    def read(self, widget):
        return widget.value.strip() or None

    def show(self, widget, value):
        widget.value = value or ""


class Percent(Kind):
    """A percentage from 0 to 100 (a link's loss)."""

    def check(self, name, value):
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise LabError(f"{name} must be a number, got {value!r}", f"give {name} as e.g. 1 (percent)") from None
        if not 0 <= number <= 100:
            raise LabError(f"{name} {number:g} is outside 0 to 100", f"give {name} as a percentage, e.g. 1")
        return number

    def describe(self):
        return "a percentage from 0 to 100"

    def widget(self, value):
        import ipywidgets as w

        return w.BoundedFloatText(value=value, min=0, max=100, step=0.1)

    def show(self, widget, value):
        widget.value = float(value)


def placement_params(placement=("same_host",), rate=None, delay_ms=(0,)) -> tuple[Param, ...]:
    """Where server and client run, as every experiment has it: on this host (loopback), or
    in two network namespaces joined by a veth link (labkit.netlink), shaped to a rate and
    given a delay (an axis: throughput against delay) and a loss.  A same_host point has no
    link: its link parameters stay at their empty values (Experiment.grid).  The arguments
    are the defaults (an experiment about links starts across one)."""
    return (Param("placement", ChoiceList("same_host", "namespaces"), list(placement),
                  "same_host: loopback; namespaces: two network stacks joined by a veth link", to=LINK),
            Param("link_rate", LinkRate(), rate, "namespaces: the link's rate, e.g. 1gbit (empty: not shaped)",
                  to=LINK),
            Param("link_delay_ms", IntList(least=0, most=10_000, noun="link delay", unit="ms"), list(delay_ms),
                  "namespaces: the delay each way, ms (netem, or the lab's delay line)", to=LINK,
                  label="one-way delay (ms)"),
            Param("link_loss_percent", Percent(), 0.0, "namespaces: frames lost each way, percent", to=LINK),
            Param("link_jitter_ms", Int(least=0), 0, "namespaces: each frame's delay varies by up to this, ms "
                  "(no more than the delay)", to=LINK),
            Param("link_mtu", Int(least=576), 1500, "namespaces: the link's MTU, bytes (loopback's is 65536)",
                  to=LINK))


# A same_host point's link parameters (it has no link).
NO_LINK = {"link_rate": None, "link_delay_ms": 0, "link_loss_percent": 0.0, "link_jitter_ms": 0, "link_mtu": 1500,
           "link_autocorking": "on"}


def autocorking_param() -> Param:
    """Linux's TCP autocorking (net.ipv4.tcp_autocorking, on by default since 3.14): a small write
    waits while an earlier packet of the socket is still queued below TCP (a qdisc such as tbf,
    the device), so small writes merge even with TCP_NODELAY.  Per namespace, so only across a
    link (placement namespaces) can the lab turn it off without touching this host's setting."""
    return Param("link_autocorking", ChoiceList("on", "off"), ["on"],
                 "namespaces: net.ipv4.tcp_autocorking in both hosts' namespaces (off: a small write is not "
                 "held back while an earlier packet waits in a queue)", to=LINK, label="autocorking")


def profile_stacks_param(default: bool = False) -> Param:
    """Where the server's time goes at every point: its stacks sampled by perf record and its
    system calls counted by name (labkit.perf.stacks); a few seconds more per point."""
    return Param("profile_stacks", Flag(), default, "record where the server's time goes at every point: "
                 "sampled stacks (a flame chart) and system calls by name", to=SWEEP)


def repeats_param(default: int = 3) -> Param:
    return Param("repeats", Int(least=1), default, "measurements per point (median and spread are shown)",
                 to=SWEEP)
