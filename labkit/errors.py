"""One error type for everything a student can get wrong or the machine can lack.

Every LabError says what went wrong and what to do about it, so a notebook can
show it as-is instead of a traceback.
"""


class LabError(Exception):
    """A problem the user can fix: `what` happened, `fix` says how to fix it."""

    def __init__(self, what: str, fix: str = ""):
        self.what = what
        self.fix = fix
        super().__init__(f"{what}\n  -> {fix}" if fix else what)


class BuildError(LabError):
    """The C compiler failed; `output` is the compiler's own message."""

    def __init__(self, what: str, output: str, fix: str = ""):
        self.output = output
        super().__init__(f"{what}\n{output}".rstrip(), fix)


class ServerFailed(LabError):
    """A server did not start, or died while being measured."""


class ClientFailed(LabError):
    """The load generator broke down during a point (it ran past its time and was killed, or
    ended without its summary): that point failed, not the parameters every point shares."""
