"""Kinds about the machine the lab runs on: the CPUs a process is pinned to, the rate of
the link between server and client."""

from __future__ import annotations

from .kinds import Kind, _words, whole_number

# A CPU set's default: computed when resolved, from the machine the lab runs on.
FROM_MACHINE = "from the machine"


class Cpus(Kind):
    """A set of CPU numbers ("0" or "0,1"); FROM_MACHINE until the pinning is resolved."""

    def check(self, name, value):
        from .. import system

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


class LinkRate(Kind):
    """A link's rate in tc's units ('100mbit', '1gbit'); empty: not shaped."""

    none_text = "not shaped"

    def check(self, name, value):
        if value is None or not str(value).strip():
            return None
        from ..netlink import rate_bits

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
