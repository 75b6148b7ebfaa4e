"""Least privilege on the grading cluster: a Dask preload (`--preload labkit.instructor.cluster.gate`)
that lets each certificate's role do only what the lab's grading needs.

certs.py already decides who can connect to whom (one CA per role).  Once connected, a
Dask scheduler would still serve every peer every operation it has: run a function on
every worker (`client.run` is the scheduler's `broadcast`), register plugins, scatter
data.  A worker runs as root, so any of those hands root to whoever holds a certificate.
Here, on the scheduler:

  - each connection's role is read from its peer certificate (subject OU, checked against
    the issuing CA's name) when Dask hands it over, before any operation it asks for is
    handled (Dask has read only its own handshake message by then);
  - every operation is allowed only to the roles in ALLOWED: a worker registers and
    reports; the grader registers as a client and asks for what `labkit grade` asks
    (identity, events, results); nobody may `broadcast`, `run_function`, register
    plugins, `scatter`, `proxy`, `feed`, restart or retire workers;
  - a refusal is logged with the peer's address and certificate, and answered with a
    PermissionError that names the operation.

And on a worker:

  - only the scheduler's certificate is served (the worker trusts no other CA anyway);
  - Dask's own `blocked_handlers` removes the operations that run code (`run`,
    `run_coroutine`, `plugin-add`, `actor_execute`, `upload_file`, ...);
  - a task is run only if it calls cluster.grade_remote; any other task's function is
    replaced by one that raises PermissionError, and the attempt is logged.

What this cannot stop (docs/instructors/cluster.md, "What someone on the cluster's network
can and cannot do"): Dask unpickles `ToPickle`
objects in any message it reads (distributed.protocol.core.loads), its handshake message
included, before any handler, so a peer holding a course certificate could run code in the
process it connects to.
The certificates are therefore the wall, and their keys are as secret as the solutions.
"""

from __future__ import annotations

import functools
import inspect
import logging
import weakref

logger = logging.getLogger("distributed.labkit.gate")

# What each role may ask the scheduler: exactly what a dask worker and `labkit grade` were seen
# to send while grading a class (tests/instructor/test_grade_dask.py grades through this gate and asserts
# that nothing was refused).  Streams opened by register-worker / register-client carry the
# rest (task results, the graph), so only those roles can open them.
ALLOWED = {
    "worker": {"register-worker", "heartbeat_worker"},
    "grader": {"register-client", "identity", "events", "gather"},
}
# Operations that run code or plant it, removed from every worker (Dask's own blocked_handlers).
WORKER_BLOCKED = ["run", "run_coroutine", "plugin-add", "plugin-remove", "actor_execute", "actor_attribute",
                  "upload_file", "update_data", "benchmark_disk", "benchmark_memory", "benchmark_network"]
TASK = "labkit.instructor.cluster.tasks.grade_remote"


def role_of(comm) -> tuple[str | None, str]:
    """(the role a connection's peer certificate proves, a description of the peer for logs)."""
    cert = (getattr(comm, "extra_info", None) or {}).get("peercert") or {}
    subject = {key: value for rdn in cert.get("subject", ()) for key, value in rdn}
    issuer = {key: value for rdn in cert.get("issuer", ()) for key, value in rdn}
    who = (f"{comm.peer_address} ({', '.join(f'{k}={v}' for k, v in subject.items()) or 'no certificate'}"
           + (f"; issued by {issuer.get('commonName')}" if issuer else "") + ")")
    role = subject.get("organizationalUnitName")
    if role is None or issuer.get("commonName") != f"labkit {role} CA":
        return None, who
    return role, who


def dask_setup(server) -> None:
    """Dask's preload hook: called once in the scheduler or worker process it was given to."""
    from distributed import Scheduler, Worker

    if isinstance(server, Scheduler):
        _guard(server, lambda role, op: op in ALLOWED.get(role, ()), accepted=("worker", "grader"))
    elif isinstance(server, Worker):
        server.blocked_handlers = sorted(set(server.blocked_handlers) | set(WORKER_BLOCKED))
        _guard(server, lambda role, op: role == "scheduler", accepted=("scheduler",))
        _only_grading_tasks(server)
    logger.info("labkit gate on the %s: roles and operations limited (labkit.instructor.cluster.gate)",
                type(server).__name__.lower())


def _guard(server, allowed, accepted: tuple[str, ...]) -> None:
    """Record each accepted connection's role; wrap every handler so an operation a role may
    not ask is refused (and logged) before it runs."""
    roles: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
    handle = server._handle_comm

    async def handle_comm(comm):
        role, who = role_of(comm)
        if role not in accepted:
            logger.warning("labkit gate: refused a connection from %s: the %s serves only %s certificates",
                           who, type(server).__name__.lower(), " and ".join(accepted))
            comm.abort()
            return
        roles[comm] = (role, who)
        await handle(comm)

    server._handle_comm = handle_comm
    for op, handler in list(server.handlers.items()):
        server.handlers[op] = _guarded(op, handler, roles, allowed, type(server).__name__.lower())


def _guarded(op, handler, roles, allowed, where):
    from distributed.core import _expects_comm

    wants_comm = _expects_comm(handler)

    async def guarded(comm, **msg):
        role, who = roles.get(comm, (None, getattr(comm, "peer_address", "?")))
        if not allowed(role, op):
            logger.warning("labkit gate: refused %r from %s on the %s", op, who, where)
            raise PermissionError(f"the grading cluster refuses {op!r} to a {role or 'unknown'} certificate: "
                                  "it runs only labkit's grading tasks (labkit.instructor.cluster.gate)")
        result = handler(comm, **msg) if wants_comm else handler(**msg)
        return await result if inspect.isawaitable(result) else result

    # Dask reads a handler's signature: `comm` first (so it passes the connection), and the
    # keywords it offers (e.g. serializers) as the wrapped handler declares them.
    params = [p for p in inspect.signature(handler).parameters.values() if p.name not in ("comm", "stream")]
    guarded.__signature__ = inspect.Signature(
        [inspect.Parameter("comm", inspect.Parameter.POSITIONAL_OR_KEYWORD), *params])
    guarded.__name__ = getattr(handler, "__name__", op)
    return guarded


def _only_grading_tasks(worker) -> None:
    """A compute-task whose function is not cluster.grade_remote runs as a refusal instead."""
    handler = worker.stream_handlers["compute-task"]

    @functools.wraps(handler)
    def compute_task(**msg):
        function = _function_of(msg.get("run_spec"))
        if function != TASK:
            logger.warning("labkit gate: refused task %r calling %s: this worker runs only %s",
                           msg.get("key"), function, TASK)
            msg["run_spec"] = _refusal(msg.get("key"), function)
        return handler(**msg)

    worker.stream_handlers["compute-task"] = compute_task


def _function_of(run_spec) -> str:
    func = getattr(run_spec, "func", None)
    if func is None:
        return f"no function ({type(run_spec).__name__})"
    return f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', repr(func))}"


def refuse(message: str):
    raise PermissionError(message)


def _refusal(key, function: str):
    from dask._task_spec import Task

    return Task(key, refuse, f"the grading worker refused a task calling {function}: it runs only {TASK} "
                             "(labkit.instructor.cluster.gate)")
