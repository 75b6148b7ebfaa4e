"""Flags to argv words, for the servers and the load generator alike: one spelling of a
value as C's strtod and strtol read it."""

from __future__ import annotations


def flag_words(flag: str, value) -> list[str]:
    """`--flag value`; True is the bare `--flag`; None and False are left out."""
    if value is None or value is False:
        return []
    if value is True:
        return [f"--{flag}"]
    if isinstance(value, float):
        return [f"--{flag}", exact(value)]
    return [f"--{flag}", str(value)]


def exact(number: float) -> str:
    """A float as argv gives it to C's strtod, exactly: a whole number as an integer ("100",
    which strtol reads too), any other as repr's shortest round-trip form ("0.1", "1e-07").
    `:g` kept six digits: 1234567.0 went to the generator as 1.23457e+06."""
    number = float(number)  # numpy's float64 reprs as np.float64(...)
    if number.is_integer() and abs(number) < 2 ** 53:
        return str(int(number))
    return repr(number)
