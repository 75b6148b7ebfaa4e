"""Exercise 4.1 (notebook 04): fill_iovec, the writev array of the load generator's
write strategies (csrc/loadgen/strategies.c), built into a scratch load generator that
uploads to an independent sink checking every byte, with one writev() per repetition.
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
from pathlib import Path

from .. import launcher
from ..scratch import build_with
from ..stubs.which_edition import adopt


IOVEC_SOURCE = Path("loadgen") / "strategies.c"


def build_iovec_loadgen(code: str) -> Path:
    """The load generator built with the student's fill_iovec(); its path."""
    return build_with("loadgen", IOVEC_SOURCE, "fill_iovec", code)


class _CheckingSink:
    """An independent sink for one connection that checks every body byte: repetition
    after repetition, buffer b is `bufsize` bytes of 'a' + b % 26 (what the load
    generator writes).  Replies "OK <n> <reads>" as the lab's servers do."""

    def __init__(self, nbufs: int, bufsize: int):
        self.repetition = b"".join(bytes([ord("a") + b % 26]) * bufsize for b in range(nbufs))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.problem = ""
        self.bodies = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.listener.settimeout(20)
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(20)
            data = b""
            try:
                while True:
                    while b"\n" not in data:
                        if (len(data) >= 3 and not data.startswith(b"PUT")) or len(data) > 1024:
                            self.problem = (f"no request line: the bytes began {data[:16]!r}; 'PUT <n>' must "
                                            "come first (the head, when head_len > 0)")
                            return
                        chunk = conn.recv(65536)
                        if not chunk:
                            return
                        data += chunk
                    line, data = data.split(b"\n", 1)
                    words = line.split()
                    if len(words) != 2 or words[0] != b"PUT" or not words[1].isdigit():
                        self.problem = f"the request line was {line[:60]!r}, not 'PUT <n>'"
                        return
                    size = int(words[1])
                    while len(data) < size:
                        chunk = conn.recv(65536)
                        if not chunk:
                            self.problem = f"the body ended after {len(data)} of {size} bytes"
                            return
                        data += chunk
                    body, data = data[:size], data[size:]
                    expected = self.repetition * (size // len(self.repetition))
                    if body != expected:
                        at = next(i for i, (a, b) in enumerate(zip(body, expected)) if a != b) \
                            if len(body) == len(expected) else min(len(body), len(expected))
                        self.problem = (f"body byte {at} (repetition {at // len(self.repetition)}, offset "
                                        f"{at % len(self.repetition)} in it) is {body[at:at + 8]!r}, expected "
                                        f"{expected[at:at + 8]!r}")
                        return
                    self.bodies += 1
                    conn.sendall(b"OK %d 1\n" % size)
            except OSError as failure:
                self.problem = f"the connection failed: {failure}"

    def close(self) -> None:
        self.thread.join(timeout=25)
        self.listener.close()


def check_fill_iovec(code: str, shape: tuple[int, int] = (3, 5), repetitions: int = 4, requests: int = 2,
                     timeout: float = 20.0) -> None:
    """Build the load generator with the student's fill_iovec and run `--strategy writev`
    against an independent server that checks every byte: the request line first, then each
    repetition's buffers in order; one writev() per repetition."""
    binary = build_iovec_loadgen(code)
    nbufs, bufsize = shape
    sink = _CheckingSink(nbufs, bufsize)
    argv = [str(binary), "--port", str(sink.port), "--service", "sink", "--clients", "1",
            "--requests", str(requests), "--strategy", "writev", "--nbufs", str(nbufs), "--bufsize", str(bufsize),
            "--repetitions", str(repetitions), "--timeout", "2"]
    child = launcher.spawn(argv, "client", None, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        stdout, stderr = launcher.run_to_end(child, timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"your load generator ran longer than {timeout:g} s") from None
    finally:
        sink.close()
    said = stderr.decode("utf-8", "replace").strip()
    assert not sink.problem, (f"with {nbufs} buffers of {bufsize} bytes: {sink.problem}\nhint: the request "
                              "line goes first only when head_len > 0, then every buffer in order, each "
                              "`size` bytes; return how many entries you filled")
    status = child.popen.returncode
    assert status == 0 and sink.bodies == requests, (
        f"the upload did not complete ({sink.bodies} of {requests} bodies arrived, exit status {status}): "
        f"{said[-400:]}\nhint: if nothing arrived, fill_iovec returned 0 entries: fill one per buffer "
        "(and one for the request line when head_len > 0) and return how many")
    summary = json.loads(stdout)
    assert summary["write_calls_per_repetition"] == 1, \
        f"{summary['write_calls_per_repetition']} writev calls per repetition: expected exactly one"
    adopt(IOVEC_SOURCE, "fill_iovec", code)
