"""A notebook run to its end by papermill, its kernel reached over Unix-domain sockets: every
notebook the lab runs without a person at it (grading, export, the tests) goes through here.

    execute(source, output, parameters=..., kernel_name=..., cwd=..., **papermill_options)
    python -m labkit.execute SOURCE OUTPUT [-p NAME VALUE ...] [-y YAML] [-k KERNEL] [--cwd DIR]
                                 [--execution-timeout S]

Why not TCP, papermill's default: jupyter_client chooses a kernel's five ports by binding
each to port 0 and closing it, writes them into the connection file, and the kernel binds
them when it has started, a second or more later.  Any process may take one of those ports in
between, and the lab's own load generator opens thousands of connections, each on an
ephemeral port of the same range: the kernel then dies with "Address already in use" before
it replies to kernel_info (papermill issue 511, jupyter_client issue 154).  jupyter_client's
`ipc` transport puts the five channels on Unix-domain sockets instead:
here, in a folder made for the run (/tmp/labkit-kernel-<pid>-...), so no other process can be
holding their names.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path


def ipc_config(folder: Path):
    """jupyter_client's configuration for a kernel on Unix sockets named `folder`/kernel-1 ...
    (an absolute name: the kernel runs in another working directory than its client)."""
    from traitlets.config import Config

    return Config({"KernelManager": {"transport": "ipc", "ip": str(folder / "kernel")}})


def execute(source, output, **options):
    """papermill.execute_notebook(source, output, **options) with the kernel on Unix sockets;
    what papermill returns, or raises."""
    import papermill

    from labkit import paths

    # a run killed with -9 cannot remove its folder: the next run removes it (owned_folder)
    folder = paths.owned_folder("labkit-kernel", Path(tempfile.gettempdir()))
    try:
        return papermill.execute_notebook(str(source), str(output), config=ipc_config(folder), **options)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _value(text: str):
    """A -p value as papermill's command line reads the simple ones: a whole number, a
    number, True, False, None, or else the text itself."""
    named = {"True": True, "False": False, "None": None}
    if text in named:
        return named[text]
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m labkit.execute",
                                     description="papermill, the kernel on Unix sockets (labkit/execute.py)")
    parser.add_argument("source")
    parser.add_argument("output")
    parser.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"))
    parser.add_argument("-y", "--parameters-yaml", action="append", default=[],
                        help="parameters as YAML, e.g. '{models: [epoll], clients: [50]}'")
    parser.add_argument("--execution-timeout", type=float, help="seconds each cell may take (default: no limit)")
    parser.add_argument("-k", "--kernel")
    parser.add_argument("--cwd")
    parser.add_argument("--save-each-cell", action="store_true",
                        help="write the output notebook after every cell (papermill's default; off here)")
    args = parser.parse_args(argv)
    import yaml

    parameters = {}
    for text in args.parameters_yaml:
        parameters.update(yaml.safe_load(text))
    parameters.update({name: _value(value) for name, value in args.parameter})
    execute(args.source, args.output, parameters=parameters, kernel_name=args.kernel, cwd=args.cwd,
            progress_bar=False, request_save_on_cell_execute=args.save_each_cell,
            execution_timeout=args.execution_timeout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
