"""The lab in a container on a student's laptop: `make lab CONTAINER=1` (container/lab.sh),
the dev container, the image's recipe and start command, the seccomp profile, and what
labkit doctor says when a seccomp filter refuses a call the lab needs.

lab.sh runs here against a stand-in engine that records its arguments (the image itself is
built and checked by container/check.sh, apart from make test: minutes); the seccomp
refusals are real, a filter installed with prctl in a child before it starts."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from labkit import paths
from test_deploy import dockerignored, ignore_patterns, instructions

ROOT = paths.ROOT
LAB_SH = ROOT / "container" / "lab.sh"
RECIPE = ROOT / "container" / "Containerfile"
PROFILE = ROOT / "container" / "seccomp.json"
LAB_CALLS = ("io_uring_setup", "io_uring_enter", "io_uring_register", "perf_event_open")
FAKE_ENGINE = """#!/bin/sh
echo "$*" >>"$ENGINE_LOG"
case "$1" in info) echo "${ENGINE_CPUS:-4}" ;; esac
exit 0
"""


def _fake_engine(tmp_path: Path, name: str = "podman") -> dict:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / name).write_text(FAKE_ENGINE)
    (bin_dir / name).chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "ENGINE_LOG": str(tmp_path / "engine.log"),
            "LAB_WORK": str(tmp_path / "work"), "LAB_PORT": "18999"}


def _lab_sh(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(LAB_SH), *args], env=env, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)


def _calls(tmp_path: Path) -> list[list[str]]:
    return [shlex.split(line) for line in (tmp_path / "engine.log").read_text().splitlines()]


def test_make_lab_container(tmp_path):
    """Make lab container builds and runs the image with every setting and prints the url."""
    done = _lab_sh(_fake_engine(tmp_path))
    assert done.returncode == 0, done.stderr
    calls = _calls(tmp_path)
    assert calls[0][:2] == ["info", "--format"]
    assert calls[1] == ["build", "-f", "container/Containerfile", "-t", "labkit-lab", "."]
    run = " ".join(calls[2])
    assert calls[2][:2] == ["run", "--rm"] and calls[2][-1] == "labkit-lab"
    for setting in (f"--security-opt seccomp={PROFILE}", "--cap-add=SYS_ADMIN", "--cap-add=NET_ADMIN",
                    "--cap-add=NET_RAW", "--cap-add=PERFMON",
                    "--security-opt systempaths=unconfined", "--pids-limit=12288", "--ulimit nofile=65536:65536",
                    "-p 127.0.0.1:18999:8888", f"-v {tmp_path / 'work'}:/lab"):
        assert setting in run, setting
    token = re.search(r"JUPYTER_TOKEN=([0-9a-f]+)", run)[1]
    assert len(token) == 48
    assert f"http://127.0.0.1:18999/lab?token={token}" in done.stdout
    assert (tmp_path / "work").is_dir(), "the work folder is made on the host"
    # another token at the next start
    assert _lab_sh(_fake_engine(tmp_path)).returncode == 0
    assert re.search(r"JUPYTER_TOKEN=([0-9a-f]+)", " ".join(_calls(tmp_path)[-1]))[1] != token


def test_command_runs_with_same_settings(tmp_path):
    """A command runs with the same settings and the engines own profile on request."""
    env = {**_fake_engine(tmp_path), "LAB_NO_BUILD": "1"}
    assert _lab_sh(env, "labkit", "doctor").returncode == 0
    assert _lab_sh({**env, "LAB_SECCOMP": "engine"}, "labkit", "doctor").returncode == 0
    with_profile, with_engines = (" ".join(call) for call in _calls(tmp_path) if call[0] == "run")
    assert with_profile.endswith("labkit-lab labkit doctor") and "JUPYTER_TOKEN" not in with_profile
    assert f"seccomp={PROFILE}" in with_profile and "seccomp" not in with_engines
    assert with_engines == with_profile.replace(f"--security-opt seccomp={PROFILE} ", "")
    assert not any(call[0] == "build" for call in _calls(tmp_path))


def test_one_cpu_and_no_engine_say_the_fix(tmp_path):
    """One cpu is said with the fix and no engine is an error with the fix."""
    done = _lab_sh({**_fake_engine(tmp_path), "ENGINE_CPUS": "1", "LAB_NO_BUILD": "1"})
    assert done.returncode == 0 and "machine has 1 CPU" in done.stdout and "podman machine set --cpus" in done.stdout
    tools = tmp_path / "tools"  # what lab.sh needs but an engine
    tools.mkdir()
    for tool in ("dirname", "mkdir", "cat", "basename"):
        (tools / tool).symlink_to(shutil.which(tool))
    done = subprocess.run(["/bin/bash", str(LAB_SH)], env={**os.environ, "PATH": str(tools), "LAB_WORK": str(tmp_path)},
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and "neither podman nor docker" in done.stderr and "Docker Desktop" in done.stderr


def _jsonc(text: str) -> dict:
    """devcontainer.json: JSON with // comments (none inside its strings but URLs' //, which follow a quote)."""
    return json.loads(re.sub(r'^\s*//.*$', "", text, flags=re.M))


def test_the_dev_container_has_lab_shs_settings(tmp_path):
    config = _jsonc((ROOT / ".devcontainer" / "devcontainer.json").read_text())
    assert (ROOT / ".devcontainer" / config["build"]["dockerfile"]).resolve() == RECIPE
    assert (ROOT / ".devcontainer" / config["build"]["context"]).resolve() == ROOT
    assert _lab_sh(_fake_engine(tmp_path)).returncode == 0
    run = " ".join(_calls(tmp_path)[-1])
    args = " ".join(config["runArgs"]).replace("${localWorkspaceFolder}", str(ROOT))
    assert args in run, "the dev container's settings are lab.sh's, in its order"
    assert config["overrideCommand"] is False, "the image's start command (tini, JupyterLab) runs"
    assert config["forwardPorts"] == [8888]
    assert config["containerEnv"]["LABKIT_HOME"] == "${containerWorkspaceFolder}/lab-work"
    assert "lab-work/" in (ROOT / ".gitignore").read_text().splitlines()


def test_make_lab_goes_to_the_container_off_linux_or_on_request(tmp_path):
    uname = tmp_path / "uname"
    uname.write_text("#!/bin/sh\necho Darwin\n")
    uname.chmod(0o755)

    def dry_run(*args, path=os.environ["PATH"]):
        return subprocess.run(["make", "--no-print-directory", "-n", "lab", *args], cwd=ROOT, capture_output=True,
                              text=True, timeout=60, env={**os.environ, "PATH": path}).stdout

    assert dry_run("CONTAINER=1").strip() == "bash container/lab.sh"
    assert dry_run(path=f"{tmp_path}:{os.environ['PATH']}").strip() == "bash container/lab.sh"
    assert "jupyter lab" in dry_run(path=f"{tmp_path}:{os.environ['PATH']}", *["CONTAINER=0"])
    assert "jupyter lab" in dry_run() and "container/lab.sh" not in dry_run()  # Linux: the two commands


def test_recipe_matches_hub_image():
    """The recipe installs the lab as the hub image does and starts under tini."""
    steps = instructions(RECIPE.read_text())
    assert ("ARG", "BASE=docker.io/library/debian:bookworm-slim") in steps and ("FROM", "${BASE}") in steps
    runs = [part.strip() for word, args in steps if word == "RUN" for part in args.split("&&")]
    assert "bash /opt/labkit/scripts/setup-system.sh" in runs and "make setup" in runs and "make build" in runs
    installs = [run for run in runs if "apt-get install" in run]
    assert installs == ["apt-get install -y -qq --no-install-recommends tini"], "one list of packages: setup-system.sh"
    entry = json.loads(next(args for word, args in steps if word == "ENTRYPOINT"))
    assert entry == ["tini", "-g", "--", "/opt/labkit/container/start.sh"]
    assert ("ENV", "PATH=/opt/labkit/.venv/bin:$PATH LABKIT_HOME=/lab") in steps  # lab.sh mounts the work there
    assert not (ROOT / "Dockerfile").exists(), "repo2docker would build it instead of the Binder files"
    patterns = ignore_patterns()
    for word, args in steps:
        if word == "COPY":
            source = args.split()[0]
            assert (ROOT / source).exists() and (source == "." or not dockerignored(source, patterns))
    assert dockerignored("lab-work/notebooks/00_setup.ipynb", patterns), "a student's work stays out of the image"
    assert os.stat(ROOT / "container" / "start.sh").st_mode & stat.S_IXUSR


def _start(tmp_path, token=None):
    """container/start.sh with the lab's own labkit and a stand-in jupyter that prints its arguments."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "jupyter").write_text('#!/bin/sh\necho "jupyter $*"\necho "token=$JUPYTER_TOKEN"\n')
    (bin_dir / "jupyter").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}",
           "LABKIT_HOME": str(tmp_path / "lab")}
    env.pop("JUPYTER_TOKEN", None)
    if token:
        env["JUPYTER_TOKEN"] = token
    return subprocess.run([str(ROOT / "container" / "start.sh"), "jupyter", "lab"], env=env, capture_output=True,
                          text=True, timeout=120)


def test_start_command_needs_a_token(tmp_path):
    """The start command copies the notebooks and never starts jupyterlab without a token."""
    done = _start(tmp_path)
    assert done.returncode == 0, done.stderr
    lab = tmp_path / "lab"
    names = sorted(p.name for p in paths.NOTEBOOKS.glob("*.ipynb"))
    assert sorted(p.name for p in (lab / "notebooks").glob("*.ipynb")) == names
    made = re.search(r"token=([0-9a-f]{48})$", done.stdout, re.M)[1]
    url = (lab / ".jupyter-url").read_text().strip()
    assert url == f"http://127.0.0.1:8888/lab?token={made}" and f"open {url}" in done.stdout
    assert stat.S_IMODE((lab / ".jupyter-url").stat().st_mode) == 0o600
    assert f"--allow-root --no-browser --ip=0.0.0.0 --port=8888 --ServerApp.port_retries=0 --ServerApp.root_dir={lab}" \
        in done.stdout
    (lab / "notebooks" / "00_setup.ipynb").write_text("{}")  # the student's edit
    done = _start(tmp_path, token="given")
    assert "token=given" in done.stdout and (lab / "notebooks" / "00_setup.ipynb").read_text() == "{}"


# ---------------------------------------------------------------------------
# The seccomp profile, and labkit doctor under a filter
# ---------------------------------------------------------------------------

def _profile_module():
    spec = importlib.util.spec_from_file_location("seccomp_profile", ROOT / "container" / "seccomp_profile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_profile_allows_the_labs_calls():
    """The profile allows the labs calls in one rule and keeps the rest of the default."""
    profile = json.loads(PROFILE.read_text())
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO"
    deciding = {name: [rule for rule in profile["syscalls"] if name in rule["names"]] for name in LAB_CALLS}
    lab_rule = profile["syscalls"][0]
    assert all(rules == [lab_rule] for rules in deciding.values()), "one rule decides each of the lab's calls"
    assert lab_rule["action"] == "SCMP_ACT_ALLOW" and not lab_rule["args"] and not lab_rule["includes"]
    assert all(f"{name}:" in lab_rule["comment"] for name in LAB_CALLS), "each call says why"
    assert tuple(_profile_module().LAB_CALLS) == LAB_CALLS
    # made from the default by the script: the default back, but for the lab's calls
    rebuilt = _profile_module().lab_profile({**profile, "syscalls": profile["syscalls"][1:]})
    assert rebuilt == profile
    # the namespaces' calls as the default decides them: allowed (the kernel asks for CAP_SYS_ADMIN)
    for name in ("unshare", "setns", "mount", "clone"):
        assert any(name in rule["names"] and rule["action"] == "SCMP_ACT_ALLOW" for rule in profile["syscalls"])


def _deny(numbers: tuple[int, ...], error: int):
    """For preexec_fn: a seccomp filter that fails the given calls with `error`, allows the rest."""
    def install():
        import ctypes
        import platform

        arch = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}[platform.machine()]  # AUDIT_ARCH_*
        ld_w_abs, jeq_k, ret_k = 0x20, 0x15, 0x06
        program = [(ld_w_abs, 0, 0, 4), (jeq_k, 0, len(numbers) * 2 + 1, arch), (ld_w_abs, 0, 0, 0)]
        for number in numbers:
            program += [(jeq_k, 0, 1, number), (ret_k, 0, 0, 0x00050000 | error)]  # SECCOMP_RET_ERRNO
        program.append((ret_k, 0, 0, 0x7FFF0000))  # SECCOMP_RET_ALLOW

        class Filter(ctypes.Structure):
            _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte),
                        ("k", ctypes.c_uint)]

        class Program(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]

        filters = (Filter * len(program))(*[Filter(*row) for row in program])
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(38, 1, 0, 0, 0) or libc.prctl(22, 2, ctypes.byref(Program(len(program), filters)), 0, 0):
            os._exit(90)
    return install


NUMBERS = {"x86_64": {"io_uring_setup": 425, "perf_event_open": 298, "unshare": 272},
           "aarch64": {"io_uring_setup": 425, "perf_event_open": 241, "unshare": 97}}[os.uname().machine]
SECCOMP_LINE = ("import json; from labkit import doctor; c = doctor.find_seccomp(); "
                "print(json.dumps([c.status, c.detail, c.fix]))")


def _seccomp_check(preexec) -> list[str]:
    done = subprocess.run([sys.executable, "-c", SECCOMP_LINE], capture_output=True, text=True, timeout=60,
                          preexec_fn=preexec)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("error, name", [(1, "EPERM"), (38, "ENOSYS")])
def test_doctor_names_each_call_a_filter_refuses_and_how_to_allow_it(error, name):
    status, detail, fix = _seccomp_check(_deny(tuple(NUMBERS.values()), error))
    assert status == "warn"
    for call, what in (("io_uring_setup", "uring server"), ("perf_event_open", "perf counters"),
                       ("unshare", "network namespaces (notebook 05)")):
        assert f"{call} ({name}): no {what}" in detail, detail
    assert "--security-opt seccomp=container/seccomp.json" in fix and "--cap-add=SYS_ADMIN" in fix


def test_doctor_names_only_what_is_refused():
    status, detail, fix = _seccomp_check(_deny((NUMBERS["io_uring_setup"],), 1))
    assert status == "warn" and detail.endswith("refuses io_uring_setup (EPERM): no uring server "
                                                "(io_uring_enter and io_uring_register come after this call)")
    assert "container/seccomp.json" in fix and "SYS_ADMIN" not in fix


def test_a_filter_that_refuses_nothing_the_lab_needs_is_ok():
    status, detail, _ = _seccomp_check(_deny((NUMBERS["unshare"] + 100_000,), 1))
    assert status == "ok" and "seccomp mode filter" in detail
    assert "io_uring_setup, perf_event_open and unshare" in detail
    assert _seccomp_check(None)[:2] == ["ok", "no seccomp filter"]


def test_arm64_check_names_missing_compiler(tmp_path):
    """The arm64 check says what to install when the cross compiler is missing."""
    done = subprocess.run(["bash", str(ROOT / "scripts" / "arm64-check.sh")], capture_output=True, text=True,
                          timeout=30, env={**os.environ, "CROSS_CC": "no-such-gcc"})
    assert done.returncode == 1 and "sudo apt-get install -y gcc-aarch64-linux-gnu" in done.stderr
    assert "arm64-check:" in (ROOT / "Makefile").read_text()
