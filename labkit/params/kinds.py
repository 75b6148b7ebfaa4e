"""Parameter kinds: each written once, with its check, its panel widget and its read-back.

Every kind provides:
  * check(name, value)   the value a notebook, `--set name=text` or a panel
                         field gave, normalised, or a LabError saying what to
                         give instead;
  * widget(value)        the panel's field for it; read(widget) gives back the
                         raw value a student entered, show(widget, value) fills it;
  * is_list              list kinds span the experiment's grid (one point per value).

Here: that contract (Kind) and the general kinds: lists, choices, numbers, flags.
Byte sizes and buffer shapes are in labkit.params.sizes; CPU sets and link rates
in labkit.params.machine.
"""

from __future__ import annotations

from ..errors import LabError


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
        from .. import build

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
