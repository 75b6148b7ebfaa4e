"""A grading cluster only the instructor can use (labkit.instructor.cluster.certs, gate, cluster).

A real `labkit scheduler` and `labkit worker` (as root, as on a grading machine) with the
course's certificates; then, as a neighbour on the cluster's network would, every way in
that we know of: no certificate, another course's CA, a worker's certificate used as a
client or against another worker, the grader's own certificate asking for more than
grading, plaintext, an expired certificate.  Each attempt tries to run `touch MARKER` as
the worker's root (or the scheduler's user); the marker must never appear, the attacker
must be refused, and the refusal must be in the log of the process that refused it.
Then the commands' own refusals: plaintext addresses, missing, misplaced, expired or
world-readable certificates, each with the fix; and `labkit doctor` on certificates."""

import asyncio
import datetime
import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest
from waits import wait_until

from labkit import doctor, paths
from labkit.instructor.cluster import certs
from test_grade_dask import Cluster

pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.geteuid() != 0, reason="grading workers run as root"),
              pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def course_certs(tmp_path_factory):
    return certs.init(tmp_path_factory.mktemp("certs") / "cluster", course="CS 431")


@pytest.fixture(scope="module")
def other_course(tmp_path_factory):
    return certs.init(tmp_path_factory.mktemp("other") / "cluster", course="somebody else's")


@pytest.fixture(scope="module")
def expired(tmp_path_factory, course_certs):
    """Each role's certificate from the course's own CAs, valid for 30 days 400 days ago."""
    long_ago = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=400)
    folder = tmp_path_factory.mktemp("expired")
    for role in certs.ROLES:
        certs.issue(course_certs, role, days=30, now=long_ago, into=folder / role)
    return folder


@pytest.fixture(scope="module")
def running(tmp_path_factory, course_certs):
    cluster = Cluster(tmp_path_factory.mktemp("secure-cluster"), workers=1, certs=course_certs)
    yield cluster
    cluster.stop()


# ---------------------------------------------------------------------------
# a neighbour's attempts


def security_as_client(cert_folder: Path, trust: Path):
    """Dask's Security presenting `cert_folder`'s certificate as a client's, trusting `trust`."""
    from distributed.security import Security

    return Security(tls_ca_file=str(trust), require_encryption=True, tls_client_cert=str(cert_folder / "cert.pem"),
                    tls_client_key=str(cert_folder / "key.pem"))


def client(address, security):
    from distributed import Client

    return Client(address, security=security, timeout="5s")


def raw_op(address, op: dict, context: ssl.SSLContext):
    """One Dask message sent on a connection of our own making, and the answer."""
    from distributed.comm import connect

    async def send():
        comm = await connect(address, timeout=5, ssl_context=context)
        try:
            await comm.write(op)
            return await comm.read()
        finally:
            comm.abort()
    return asyncio.run(send())


def context_without_certificate(trust: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(trust))
    context.check_hostname = False
    return context


def touch(marker: Path) -> list[str]:
    return ["touch", str(marker)]


# Each attempt: (name, what it does given the cluster, the course's certs, another CA's, the expired
# set and the marker, who logs the refusal, and a piece of that log line).
def _no_certificate(c, ours, theirs, old, marker):
    return raw_op(c.address, {"op": "broadcast", "msg": {"op": "run"}},
                  context_without_certificate(ours / "grader" / "trust.pem"))


def _another_ca(c, ours, theirs, old, marker):
    with client(c.address, security_as_client(theirs / "grader", ours / "grader" / "trust.pem")) as attacker:
        return attacker.run(subprocess.run, touch(marker))


def _worker_cert_as_client(c, ours, theirs, old, marker):
    with client(c.address, security_as_client(ours / "worker", ours / "grader" / "trust.pem")) as attacker:
        return attacker.run(subprocess.run, touch(marker))


def _worker_cert_broadcast(c, ours, theirs, old, marker):
    security = security_as_client(ours / "worker", ours / "grader" / "trust.pem")
    answer = raw_op(c.address, {"op": "broadcast", "msg": {"op": "run"}},
                    security.get_connection_args("client")["ssl_context"])
    if isinstance(answer, dict) and "PermissionError" in str(answer.get("exception_text")):
        raise PermissionError(answer["exception_text"])
    return answer  # anything else: the broadcast went through


def _worker_cert_to_a_worker(c, ours, theirs, old, marker):
    # trusting the worker CA (in the scheduler's trust.pem), so that it is the worker that refuses
    security = security_as_client(ours / "worker", ours / "scheduler" / "trust.pem")
    return raw_op(c.worker_addresses()[0], {"op": "run", "function": b"", "args": b"", "kwargs": b""},
                  security.get_connection_args("client")["ssl_context"])


def _grader_client_run(c, ours, theirs, old, marker):
    with client(c.address, certs.load("grader", ours).security()) as attacker:
        return attacker.run(subprocess.run, touch(marker))


def _grader_run_on_scheduler(c, ours, theirs, old, marker):
    with client(c.address, certs.load("grader", ours).security()) as attacker:
        return attacker.run_on_scheduler(subprocess.run, touch(marker))


def _grader_submits_another_task(c, ours, theirs, old, marker):
    with client(c.address, certs.load("grader", ours).security()) as attacker:
        return attacker.submit(subprocess.run, touch(marker), resources={"grading": 1}, pure=False).result(timeout=30)


def _grader_registers_a_plugin(c, ours, theirs, old, marker):
    from distributed.diagnostics.plugin import WorkerPlugin

    with client(c.address, certs.load("grader", ours).security()) as attacker:
        return attacker.register_plugin(WorkerPlugin(), name="p")


def _expired_grader(c, ours, theirs, old, marker):
    # labkit's own check refuses an expired certificate; this goes round it, as an attacker would
    with client(c.address, security_as_client(old / "grader", ours / "grader" / "trust.pem")) as attacker:
        return attacker.run(subprocess.run, touch(marker))


def _plaintext(c, ours, theirs, old, marker):
    from distributed import Client

    with Client(c.address.replace("tls://", "tcp://"), timeout="5s") as attacker:
        return attacker.run(subprocess.run, touch(marker))


ATTEMPTS = [
    ("no certificate", _no_certificate, "scheduler", "TLS handshake failed"),
    ("a certificate from another CA", _another_ca, "scheduler", "TLS handshake failed"),
    ("a worker's certificate as a client: client.run", _worker_cert_as_client, "scheduler",
     "refused 'register-client'"),
    ("a worker's certificate: broadcast (client.run's operation)", _worker_cert_broadcast, "scheduler",
     "refused 'broadcast'"),
    ("a worker's certificate straight to a worker", _worker_cert_to_a_worker, "w0", "TLS handshake failed"),
    ("the grader's certificate: client.run", _grader_client_run, "scheduler", "refused 'broadcast'"),
    ("the grader's certificate: run_on_scheduler", _grader_run_on_scheduler, "scheduler", "refused 'run_function'"),
    ("the grader's certificate: a task that is not grading", _grader_submits_another_task, "w0",
     "refused task"),
    ("the grader's certificate: a worker plugin", _grader_registers_a_plugin, "scheduler",
     "refused 'register_worker_plugin'"),
    ("an expired grader certificate", _expired_grader, "scheduler", "certificate has expired"),
    ("plaintext (tcp://) to the TLS port", _plaintext, "scheduler", "TLS handshake failed"),
]


@pytest.mark.parametrize("name, attempt, logged_by, logged", ATTEMPTS, ids=[a[0] for a in ATTEMPTS])
def test_a_neighbour_is_refused_and_nothing_runs(running, course_certs, other_course, expired, tmp_path, name,
                                                 attempt, logged_by, logged):
    marker = tmp_path / "ran"
    os.chmod(tmp_path, 0o777)
    log = running.folder / f"{logged_by}.log"
    before = log.read_text()
    started = time.monotonic()
    with pytest.raises(Exception) as refused:
        attempt(running, course_certs, other_course, expired, marker)
    seen = f"{type(refused.value).__name__}: {str(refused.value)[:200]}"
    def logged_since():
        return logged in log.read_text()[len(before):]

    wait_until(logged_since, within=3)  # the refusing process writes its log line
    new = log.read_text()[len(before):]
    print(f"{name}: the attacker saw {seen!r} after {time.monotonic() - started:.1f} s; "
          f"{logged_by}'s log: {[line[line.find(' - ') + 3:][:160] for line in new.splitlines() if logged in line]}")
    assert not marker.exists(), f"{name}: the attacker's command ran"
    assert logged in new, f"{name}: the {logged_by} did not log the refusal:\n{new[-2000:]}"
    assert running.alive(), f"{name}: the cluster did not survive the attempt"


def test_the_cluster_still_grades_after_the_attempts(running, course_certs):
    """The refusals left the cluster usable: the grader's certificate still reaches it."""
    with client(running.address, certs.load("grader", course_certs).security()) as grader:
        assert len(grader.scheduler_info()["workers"]) == 1


def test_only_tls_ports_listen_outside(running):
    """Nothing but the tls ports listens beyond loopback and no route names a task."""
    for process in running.processes:
        listening = [c for c in psutil.Process(process.pid).net_connections("inet")
                     if c.status == psutil.CONN_LISTEN]
        for socket in listening:
            if socket.laddr.ip in ("127.0.0.1", "::1"):
                continue
            # beyond loopback: only the Dask comm port, which speaks TLS with certificates
            with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
                raw = ssl.create_default_context()
                raw.check_hostname, raw.verify_mode = False, ssl.CERT_NONE
                with raw.wrap_socket(__import__("socket").create_connection(("127.0.0.1", socket.laddr.port), 5)) as s:
                    s.sendall(b"x")
                    s.recv(1)
        http = [c.laddr.port for c in psutil.Process(running.processes[0].pid).net_connections("inet")
                if c.status == psutil.CONN_LISTEN and c.laddr.ip == "127.0.0.1"
                and c.laddr.port != int(running.address.rsplit(":", 1)[1])]
        for port in http:  # Dask's HTTP server, on loopback, with no routes: no dashboard, no task names
            for route in ("/status", "/json/identity.json", "/info/main/workers.html"):
                with pytest.raises(urllib.error.HTTPError) as answer:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}{route}", timeout=5)
                assert answer.value.code == 404


# ---------------------------------------------------------------------------
# the commands' own refusals


def labkit(*args, env=None):
    return subprocess.run([sys.executable, "-m", "labkit", *args], cwd=paths.ROOT, capture_output=True, text=True,
                          timeout=60, env=dict(os.environ, **(env or {})))


def world_readable(tmp_path, course_certs):
    folder = tmp_path / "worker"
    folder.mkdir()
    for name in ("cert.pem", "key.pem", "trust.pem"):
        (folder / name).write_bytes((course_certs / "worker" / name).read_bytes())
    (folder / "key.pem").chmod(0o644)
    return folder


REFUSALS = [
    # (what, the command given the course's certs, the expired set and tmp_path, what stderr must say)
    ("a plaintext scheduler, to a worker", lambda ok, old, tmp: ["worker", "tcp://127.0.0.1:8786", "--certs", ok],
     ["refuses tcp://127.0.0.1:8786 (tcp://)", "mutual TLS only", "labkit cluster init"]),
    ("a plaintext scheduler, to the grader",
     lambda ok, old, tmp: ["grade", str(tmp), "--out", str(tmp / "out"), "--scheduler", "tcp://127.0.0.1:8786",
                           "--certs", ok], ["refuses tcp://127.0.0.1:8786", "labkit cluster init"]),
    ("no certificates", lambda ok, old, tmp: ["worker", "tls://127.0.0.1:8786", "--certs", str(tmp / "none")],
     ["no worker certificate", "missing", "labkit cluster init"]),
    ("an expired worker certificate", lambda ok, old, tmp: ["worker", "tls://127.0.0.1:8786", "--certs", old],
     ["the worker certificate", "expired on", "labkit cluster init DIR --force"]),
    ("an expired scheduler certificate", lambda ok, old, tmp: ["scheduler", "--port", "0", "--certs", old],
     ["the scheduler certificate", "expired on"]),
    ("an expired grader certificate",
     lambda ok, old, tmp: ["grade", str(tmp), "--out", str(tmp / "out"), "--scheduler", "tls://127.0.0.1:8786",
                           "--certs", old], ["the grader certificate", "expired on"]),
    ("a worker's folder given to the grader",
     lambda ok, old, tmp: ["grade", str(tmp), "--out", str(tmp / "out"), "--scheduler", "tls://127.0.0.1:8786",
                           "--certs", str(Path(ok) / "worker")], ["is a certificate for worker", "not for the grader"]),
    ("a key other users can read",
     lambda ok, old, tmp: ["worker", "tls://127.0.0.1:8786", "--certs", str(world_readable(tmp, Path(ok)))],
     ["can be read by other users", "chmod 600"]),
    ("a second init over the course's certificates", lambda ok, old, tmp: ["cluster", "init", ok],
     ["already holds a course's certificates", "--force"]),
]


@pytest.mark.parametrize("what, command, says", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_the_commands_refuse_with_the_fix(course_certs, expired, tmp_path, what, command, says):
    result = labkit(*command(str(course_certs), str(expired), tmp_path))
    assert result.returncode == 2, f"{what}: exit {result.returncode}\n{result.stderr}"
    for piece in says:
        assert piece in result.stderr, f"{what}: {piece!r} not in\n{result.stderr}"
    assert "Traceback" not in result.stderr


def test_cluster_init_keys_are_private(tmp_path):
    """Cluster init writes keys only their owner reads and says where to copy."""
    result = labkit("cluster", "init", str(tmp_path / "c"), "--course", "CS 431", "--days", "120")
    assert result.returncode == 0, result.stderr
    for role in certs.ROLES:
        assert f"{tmp_path / 'c'}/{role}/" in result.stdout
        assert (tmp_path / "c" / role).stat().st_mode & 0o777 == 0o700
        assert (tmp_path / "c" / role / "key.pem").stat().st_mode & 0o777 == 0o600
        loaded = certs.load(role, tmp_path / "c")
        assert "CS 431" in loaded.subject and 119 < loaded.days_left() <= 120
    assert "stay here" in result.stdout and (tmp_path / "c" / "ca" / "worker-ca.key").stat().st_mode & 0o077 == 0


def test_doctor_reports_each_certificate_and_its_expiry(course_certs, expired):
    good = {check.name: check for check in doctor.find_cluster_certs(course_certs)}
    assert set(good) == {f"cluster {role} certificate" for role in certs.ROLES}
    assert all(check.status == doctor.OK and "days left" in check.detail for check in good.values())
    worker_only = doctor.find_cluster_certs(course_certs / "worker")
    assert [check.name for check in worker_only] == ["cluster worker certificate"]
    old = doctor.find_cluster_certs(expired)
    assert {check.status for check in old} == {doctor.FAIL}
    assert all("expired on" in check.detail and "--force" in check.fix for check in old)
    soon = certs.issue(course_certs, "worker", days=3, into=course_certs.parent / "soon")
    assert [check.status for check in doctor.find_cluster_certs(soon)] == [doctor.WARN]
