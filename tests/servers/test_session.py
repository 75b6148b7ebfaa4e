"""The session contract (csrc/services/session.h), byte by byte, with no socket and no server:
build/bin/session_drive runs a script of the steps a concurrency model takes (a read of these
bytes, a write of so many, the client's end of file) and prints what the session answered.
Each case is one script and the exact lines it must print; the servers' tests
(test_protocol.py) then only need to show that each model moves those bytes."""

import subprocess

import pytest

from labkit import paths

DRIVE = paths.BUILD / "bin" / "session_drive"

# name -> (script, what session_drive prints)
CASES = {
    "a request line and its body split over reads: the reply counts the body's reads": (
        ["service sink", "read PU", "read T 3\\nab", "write all", "read c", "write all"],
        ["wrote ", "wrote OK 3 2\\n"]),
    "a line may end in CRLF": (
        ["service sink", "read PUT 1\\r\\nz", "write all"],
        ["wrote OK 1 1\\n"]),
    "two pipelined requests in one read: one reply each, each body delivered by that read": (
        ["service sink", "read PUT 1\\nxPUT 2\\nyz", "write 3", "write all"],
        ["wrote OK ", "wrote 1 1\\nOK 2 1\\n"]),
    "an unknown verb: ERR, what follows is ignored, and the session is done once it is sent": (
        ["service sink", "read GET 1\\nPUT 1\\nx", "done", "write all", "done", "room"],
        ["done 0", "wrote ERR unknown verb; expected PUT <n>\\n", "done 1", "room 0"]),
    "a line of 1,025 bytes with no newline: ERR": (
        ["service sink", "fill 1025 a", "write all", "done"],
        ["filled 1025", "wrote ERR request line longer than 1024 bytes\\n", "done 1"]),
    "end of file with a reply pending: the reply is sent, then done": (
        ["service sink", "read PUT 2\\nxy", "eof", "done", "room", "write all", "done"],
        ["done 0", "room 0", "wrote OK 2 1\\n", "done 1"]),
    "end of file inside a body: that request is dropped, done at once": (
        ["service sink", "read PUT 5\\nab", "eof", "done", "pending"],
        ["done 1", "pending 0"]),
    "a client that never reads: the output fills (160 KiB), then the input (16 KiB), then no room": (
        ["service echo", "fill 200000 e", "room", "pending"],
        ["filled 180224", "room 0", "pending 163840"]),
    "a part of the output written: still no room; all of it: the waiting input is echoed": (
        ["service echo", "fill 180224 e", "write 100", "room", "pending", "write all", "pending", "room"],
        ["filled 180224", "wrote " + "e" * 100, "room 0", "pending 163740", "wrote " + "e" * 163740,
         "pending 16384", "room 16384"]),
    "the read buffer, asked for twice before the read is reported, is the same": (
        ["service echo", "samebuf", "read hi", "write all"],
        ["same", "wrote hi"]),
}


@pytest.mark.parametrize("name", CASES)
def test_a_session_answers_each_step_as_its_contract_says(name, built_bin):
    script, expected = CASES[name]
    done = subprocess.run([str(DRIVE)], input="\n".join(script) + "\n", capture_output=True, text=True, timeout=10)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == expected
