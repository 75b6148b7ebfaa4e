"""A real JupyterHub on this machine, for tests/install/test_hub.py: local users, the hub with its
proxy, and a client that acts through the hub's REST API and the users' Jupyter servers.

    with local_users(2, homes) as users, running_hub(folder, install) as hub:
        client = HubClient(hub)
        await client.start_server(user.name)          # POST /hub/api/users/<name>/server
        kernel = await client.start_kernel(user.name)  # POST /user/<name>/api/kernels, via the proxy
        outputs = await kernel.execute("print(1)")

The boundary, declared once: the hub, its proxy and every user server listen on 127.0.0.1
only, on ports no one else holds; no one can log in (the null authenticator: there is no
login page), and the test's one credential is a service token whose role grants what the
test does and no more (ROLE_SCOPES).  The proxy's API has its own token, the users'
servers accept only tokens the hub vouches for.

Where things come from: JupyterHub and jupyterhub-singleuser from the venv (the lock's
test extra); configurable-http-proxy from npm, installed by `make test` into the venv
(Makefile: HUB_PROXY, tests/hub/package-lock.json)."""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from tornado.websocket import websocket_connect

from labkit.instructor.sandbox.uids import kill_all

VENV_BIN = Path(sys.executable).parent
JUPYTERHUB = VENV_BIN / "jupyterhub"
SINGLEUSER = VENV_BIN / "jupyterhub-singleuser"
PROXY = Path(sys.prefix) / "hub-proxy" / "node_modules" / ".bin" / "configurable-http-proxy"
LOOPBACK = "127.0.0.1"  # where everything of the hub's listens, and nowhere else
SERVICE = "labkit-test"
# What the test's token may do: make the users (admin:users), start, read and stop their
# servers (admin:servers), and use those servers' APIs (access:servers).
ROLE_SCOPES = ["admin:users", "admin:servers", "access:servers"]
START_LIMIT_S = 60   # the hub up, or a user's server ready
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def missing() -> list[str]:
    """What this machine lacks to run a hub, each with what to install."""
    found = []
    if not JUPYTERHUB.exists() or not SINGLEUSER.exists():
        found.append(f"JupyterHub is not in {VENV_BIN.parent}: make setup (requirements.txt pins it)")
    if shutil.which("node") is None:
        found.append("Node.js (configurable-http-proxy runs on it): sudo apt-get install -y nodejs npm "
                     "(Node.js 18 or newer)")
    if not PROXY.exists():
        found.append(f"configurable-http-proxy is not in {PROXY.parents[2]}: make test installs it with npm "
                     "(tests/hub/package-lock.json); without npm: sudo apt-get install -y nodejs npm")
    return found


# ---------------------------------------------------------------------------
# users


@dataclass(frozen=True)
class LocalUser:
    name: str
    uid: int
    home: Path


@contextmanager
def local_users(count: int, homes: Path):
    """`count` real users (in /etc/passwd: the hub's spawner looks them up by name), named
    labkit-hub-<random>-<n>, who cannot log in, each with an empty home under `homes`.
    Afterwards every process of theirs is killed and they are deleted, whatever happened."""
    tag = secrets.token_hex(3)
    made = []
    try:
        for n in range(count):
            name = f"labkit-hub-{tag}-{n}"
            home = homes / name
            subprocess.run(["useradd", "--no-create-home", "--home-dir", str(home), "--user-group",
                            "--shell", "/usr/sbin/nologin", name], check=True, capture_output=True, text=True)
            entry = pwd.getpwnam(name)
            made.append(LocalUser(name, entry.pw_uid, home))
            home.mkdir(mode=0o755)
            os.chown(home, entry.pw_uid, entry.pw_gid)
        yield made
    finally:
        for user in made:
            kill_all(user.uid, "", None)
            subprocess.run(["userdel", user.name], capture_output=True, check=False)


# ---------------------------------------------------------------------------
# the hub


def free_ports(count: int) -> list[int]:
    """`count` distinct loopback ports free at this moment, below the kernel's range of
    ephemeral ports (ip_local_port_range).  A port the kernel hands out (a bind to port 0)
    may be handed out again, to a socket that binds port 0 or connects, before the hub binds
    it: a JupyterLab kernel's ZeroMQ socket can take the hub's, and then the hub exits and
    the proxy reads ZeroMQ's greeting from the port.  Below the range only an explicit bind
    takes a port."""
    first_ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    found: list[int] = []
    for port in secrets.SystemRandom().sample(range(max(1024, first_ephemeral - 8192), first_ephemeral), 256):
        with socket.socket() as sock:
            try:
                sock.bind((LOOPBACK, port))
            except OSError:  # in use: another
                continue
        found.append(port)
        if len(found) == count:
            return found
    raise AssertionError(f"no {count} free loopback ports below {first_ephemeral}")


@dataclass(frozen=True)
class Hub:
    url: str          # the proxy's public side: /hub/... and /user/<name>/...
    token: str        # the test service's API token
    process: psutil.Popen
    log: Path


def hub_config(folder: Path, install: Path, token: str, ports: list[int]) -> dict:
    """JupyterHub's configuration (a traitlets JSON config file): its state in `folder`, on
    three loopback `ports` (the proxy's public side, the hub, the proxy's API), and
    LocalProcessSpawner running the venv's jupyterhub-singleuser with the install's labkit."""
    public, hub, proxy_api = ports
    return {
        "JupyterHub": {
            "bind_url": f"http://{LOOPBACK}:{public}",
            "hub_bind_url": f"http://{LOOPBACK}:{hub}",
            "db_url": f"sqlite:///{folder / 'jupyterhub.sqlite'}",
            "cookie_secret_file": str(folder / "jupyterhub_cookie_secret"),
            "authenticator_class": "null",
            "spawner_class": "localprocess",
            "services": [{"name": SERVICE, "api_token": token}],
            "load_roles": [{"name": SERVICE, "scopes": ROLE_SCOPES, "services": [SERVICE]}],
        },
        "ConfigurableHTTPProxy": {
            "api_url": f"http://{LOOPBACK}:{proxy_api}",
            "auth_token": secrets.token_hex(32),
            "command": [str(PROXY)],
            "pid_file": str(folder / "jupyterhub-proxy.pid"),
        },
        "Spawner": {
            "cmd": [str(SINGLEUSER)],
            "ip": LOOPBACK,
            "notebook_dir": "~",
            "default_url": "/lab",
            "start_timeout": START_LIMIT_S,
            "http_timeout": START_LIMIT_S,
            # the install's labkit first: the venv's editable labkit (the checkout) comes after
            "environment": {"PATH": os.environ["PATH"], "LANG": "C.UTF-8", "PYTHONPATH": str(install)},
        },
    }


@contextmanager
def running_hub(folder: Path, install: Path):
    """JupyterHub and its proxy, run as root in `folder` (mode 0700: its database, cookie
    secret and tokens are there), until the block ends; then the hub stops its users' servers
    and its proxy, and whatever of it still runs is killed."""
    folder.mkdir(mode=0o700)
    token, ports = secrets.token_hex(32), free_ports(3)
    config = folder / "jupyterhub_config.json"
    config.touch(mode=0o600)
    config.write_text(json.dumps(hub_config(folder, install, token, ports), indent=1))
    log = folder / "jupyterhub.log"
    env = {"PATH": os.environ["PATH"], "LANG": "C.UTF-8", "HOME": str(folder)}
    with open(log, "wb") as out:
        process = psutil.Popen([str(JUPYTERHUB), "-f", str(config)], cwd=folder, env=env, stdout=out,
                               stderr=subprocess.STDOUT, start_new_session=True)
    hub = Hub(f"http://{LOOPBACK}:{ports[0]}", token, process, log)
    try:
        yield hub
    finally:
        stop_hub(hub)


def stop_hub(hub: Hub) -> None:
    """SIGTERM: the hub stops the servers it spawned and its proxy; what is left is killed."""
    everything = [hub.process]
    try:
        everything += hub.process.children(recursive=True)
    except psutil.NoSuchProcess:
        pass
    if hub.process.poll() is None:
        hub.process.send_signal(signal.SIGTERM)
        try:
            hub.process.wait(timeout=30)
        except psutil.TimeoutExpired:
            pass
    for proc in everything:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(everything, timeout=5)


def hub_log(hub: Hub, lines: int = 40) -> str:
    return "\n".join(hub.log.read_text(errors="replace").splitlines()[-lines:])


# ---------------------------------------------------------------------------
# acting through the hub


class HubClient:
    """The hub's REST API and the users' servers behind its proxy, with the service token."""

    def __init__(self, hub: Hub):
        self.hub = hub
        self.http = AsyncHTTPClient()

    def _request(self, path: str, method: str = "GET", body=None, timeout: float = 30) -> HTTPRequest:
        return HTTPRequest(self.hub.url + path, method=method, request_timeout=timeout,
                           headers={"Authorization": f"token {self.hub.token}"},
                           body=json.dumps(body or {}) if method in ("POST", "PUT") else None)

    async def call(self, path: str, method: str = "GET", body=None, timeout: float = 30):
        """The JSON `path` answers (None for an empty answer); an error names the hub's log."""
        try:
            response = await self.http.fetch(self._request(path, method, body, timeout))
        except HTTPClientError as error:
            text = error.response.body.decode(errors="replace")[:1000] if error.response else ""
            raise AssertionError(f"{method} {path}: {error}\n{text}\nthe hub's log:\n{hub_log(self.hub)}") from None
        return json.loads(response.body) if response.body else None

    async def wait_until_up(self) -> None:
        stop = time.monotonic() + START_LIMIT_S
        while True:
            assert self.hub.process.poll() is None, f"the hub exited:\n{hub_log(self.hub)}"
            try:
                await self.http.fetch(self._request("/hub/api/", timeout=2))
                return
            except (OSError, HTTPClientError):
                assert time.monotonic() < stop, f"the hub did not answer in {START_LIMIT_S} s:\n{hub_log(self.hub)}"
                await asyncio.sleep(0.2)

    async def start_server(self, name: str) -> None:
        """The user in the hub's database, and their server started and ready."""
        await self.call(f"/hub/api/users/{name}", "POST")
        await self.call(f"/hub/api/users/{name}/server", "POST", timeout=START_LIMIT_S)
        stop = time.monotonic() + START_LIMIT_S
        while not (await self.call(f"/hub/api/users/{name}"))["servers"].get("", {}).get("ready"):
            assert time.monotonic() < stop, f"{name}'s server was not ready in {START_LIMIT_S} s:\n{hub_log(self.hub)}"
            await asyncio.sleep(0.2)

    async def stop_server(self, name: str) -> None:
        await self.call(f"/hub/api/users/{name}/server", "DELETE", timeout=START_LIMIT_S)

    async def start_kernel(self, name: str, kernel: str = "labkit") -> Kernel:
        """A `kernel` kernel of `name`'s server, in their home, with its websocket open."""
        model = await self.call(f"/user/{name}/api/kernels", "POST", {"name": kernel, "path": ""})
        ws_url = self.hub.url.replace("http", "ws", 1) + \
            f"/user/{name}/api/kernels/{model['id']}/channels?session_id={uuid.uuid4().hex}"
        channels = await websocket_connect(HTTPRequest(ws_url, headers={"Authorization": f"token {self.hub.token}"}))
        return Kernel(self, name, model["id"], channels)


class CellError(AssertionError):
    """A cell the kernel did not answer `ok`: the test fails with the cell's head and traceback."""


class Kernel:
    """One kernel of a user's server, spoken to in the Jupyter messaging protocol over the
    server's websocket (JSON messages; each names its channel)."""

    def __init__(self, client: HubClient, user: str, kernel_id: str, channels):
        self.client, self.user, self.id, self.channels = client, user, kernel_id, channels
        self.session = uuid.uuid4().hex

    async def execute(self, code: str, limit_s: float = 120) -> str:
        """Run `code`; what it printed.  CellError (with the code's head and the traceback)
        unless the kernel replies `ok`."""
        msg_id = uuid.uuid4().hex
        await self.channels.write_message(json.dumps({
            "header": {"msg_id": msg_id, "msg_type": "execute_request", "session": self.session,
                       "username": self.user, "version": "5.3", "date": ""},
            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
            "content": {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                        "allow_stdin": False, "stop_on_error": True}}))
        printed, reply, idle = [], None, False
        stop = time.monotonic() + limit_s
        while reply is None or not idle:
            try:
                raw = await asyncio.wait_for(self.channels.read_message(), max(0, stop - time.monotonic()))
            except TimeoutError:
                raise CellError(f"{self.user}: no reply in {limit_s:g} s to\n{_head(code)}") from None
            if raw is None:
                raise CellError(f"{self.user}: the kernel's websocket closed while running\n{_head(code)}")
            if isinstance(raw, bytes):
                continue  # a message with binary buffers (widgets): none of ours
            message = json.loads(raw)
            if message.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = message["msg_type"], message["content"]
            if kind == "stream" and content.get("name") == "stdout":
                printed.append(content["text"])
            elif kind == "execute_reply":
                reply = content
            elif kind == "status" and content.get("execution_state") == "idle":
                idle = True
        if reply["status"] != "ok":
            traceback = ANSI.sub("", "\n".join(reply.get("traceback", [])))
            raise CellError(f"{self.user}: {reply.get('ename')}: {reply.get('evalue')} in\n{_head(code)}\n{traceback}")
        return "".join(printed)

    async def shutdown(self) -> None:
        self.channels.close()
        await self.client.call(f"/user/{self.user}/api/kernels/{self.id}", "DELETE")


def _head(code: str, lines: int = 6) -> str:
    return "\n".join("    " + line for line in code.splitlines()[:lines])
