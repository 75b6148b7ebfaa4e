"""Byte sizes and buffer shapes, with their units: '10MB' held as 10485760 bytes, '15x100' as NxB text."""

from __future__ import annotations

import re

from ..errors import LabError
from .kinds import Kind, _words


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
            from ..build import loadgen_limits

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
            from ..build import loadgen_limits

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
