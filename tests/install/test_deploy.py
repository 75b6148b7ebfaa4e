"""The image recipe repo2docker builds as it is (Binder, or a hub's image built from this
repository): apt.txt, environment.yml and postBuild at the top, and no binder/ folder (with
one, repo2docker would read that folder alone).  repo2docker's base image is Ubuntu
(buildpack-deps:24.04 for repo2docker 2026.4), so apt.txt is setup-system.sh's Ubuntu list,
which stays the one place the system packages are named.

Then Dockerfile.hub, the image for hubs that take images (not called Dockerfile, which
repo2docker would build instead of the files above): read and checked rule by rule, each
rule shown to catch a recipe that breaks it, and its start command run.  And docs/deploy.md:
its YAML parses, its Python sets real traits, its labkit commands are labkit's, and what it
quotes is what labkit prints."""

import fnmatch
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from labkit import confinement, paths

ROOT = paths.ROOT


def setup_system_list(distro: str) -> list[str]:
    done = subprocess.run(["bash", str(ROOT / "scripts" / "setup-system.sh"), "--list", distro],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_apt_txt_is_setup_systems_ubuntu_list():
    listed = setup_system_list("ubuntu")
    assert {"gcc", "make", "libffi-dev", "linux-tools-generic", "iproute2"} <= set(listed)
    assert not any(name.startswith("linux-tools-") and name[-1].isdigit() for name in listed), \
        "a kernel-specific package: the image's build host is not the kernel it runs on"
    assert (ROOT / "apt.txt").read_text().split() == listed, \
        "apt.txt differs: bash scripts/setup-system.sh --list ubuntu > apt.txt"


@pytest.mark.parametrize("distro, has, lacks", [
    ("debian", {"linux-perf", "chromium"}, {"linux-tools-generic"}),
    ("ubuntu", {"linux-tools-common"}, {"chromium", "linux-perf"}),  # Ubuntu's chromium is a snap
])
def test_the_list_names_each_distributions_own_packages(distro, has, lacks):
    listed = set(setup_system_list(distro))
    assert has <= listed and not lacks & listed


def test_the_list_refuses_a_distribution_it_does_not_know():
    done = subprocess.run(["bash", str(ROOT / "scripts" / "setup-system.sh"), "--list", "fedora"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "knows ubuntu and debian" in done.stderr and done.stdout == ""


def test_post_build_does_what_make_setup_does_for_the_images_python():
    post_build = ROOT / "postBuild"
    assert os.access(post_build, os.X_OK)
    text = post_build.read_text()
    assert text.startswith("#!/usr/bin/env bash\n") and "set -euo pipefail" in text
    makefile = (ROOT / "Makefile").read_text()
    # the kernel: the same name and display name as make setup's (the notebooks name "labkit")
    kernel = re.search(r"-m ipykernel install --sys-prefix (.*)", makefile)[1]
    assert f"python -m ipykernel install --sys-prefix {kernel}" in text
    assert re.search(r"^make build$", text, re.M)
    assert "cp scripts/jupyterlab-overrides.json" in text and "share/jupyter/lab/settings" in text
    assert not (ROOT / "binder").exists(), "repo2docker would read binder/ alone and miss the top-level files"


# ---------------------------------------------------------------------------
# Dockerfile.hub: the image for hubs that take images.  It cannot be built here (no Docker,
# no registry), so what can be read is checked exactly, and its start command is run.
# ---------------------------------------------------------------------------

IMAGE = ROOT / "Dockerfile.hub"
INSTALL = "/opt/labkit"
# chmod that gives group or others write: g+w, o+w, a+w, +w, or a mode whose group or other digit has 2
GROUP_OR_OTHER_WRITE = r"[augo]*\+[rwxX]*w|\b[0-7]?[0-7][2367][0-7]\b|\b[0-7]?[0-7][0-7][2367]\b"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction: continuation lines joined, comments dropped."""
    found, pending = [], ""
    for line in text.splitlines():
        if line.lstrip().startswith("#") or (not pending and not line.strip()):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        word, _, args = (pending + line).strip().partition(" ")
        found.append((word.upper(), " ".join(args.split())))
        pending = ""
    return found


def commands(text: str) -> list[str]:
    """Every shell command the RUN instructions run, split at && (in order)."""
    return [part.strip() for word, args in instructions(text) if word == "RUN" for part in args.split("&&")]


def image_problems(text: str) -> list[str]:
    """What is wrong with an image recipe, by the rules in Dockerfile.hub's comments; [] if nothing."""
    steps, runs = instructions(text), commands(text)
    problems = []

    def first(pattern: str) -> int:
        return next((i for i, run in enumerate(runs) if re.search(pattern, run)), -1)

    order = [first(r"^bash /opt/labkit/scripts/setup-system\.sh$"), first(r"^make setup$"),
             first(r'pip install .*"jupyterhub==\$\{JUPYTERHUB_VERSION\}"$'), first(r"pip check$"),
             first(r"^make build$")]
    names = ["setup-system.sh run", "make setup", "jupyterhub at the build argument's version", "pip check after it",
             "make build"]
    problems += [f"no {name}" for name, at in zip(names, order) if at < 0]
    if all(at >= 0 for at in order) and order != sorted(order):
        problems.append("out of order: " + ", ".join(name for _, name in sorted(zip(order, names))))
    # the system packages come from setup-system.sh alone; tini is the image's own
    for run in runs:
        if re.search(r"apt-get install|apt install", run):
            named = {word for word in run.split()[2:] if not word.startswith("-")} - {"install"}
            if named != {"tini"}:
                problems.append(f"a package list of its own: {sorted(named)}")
        hub_pin = r'pip install [-\w ]*"jupyterhub==\$\{JUPYTERHUB_VERSION\}"$'
        if re.search(r"pip install", run) and not re.search(hub_pin, run):
            problems.append(f"a pip install besides the lock's and the hub's: {run}")
    # the install is root's, read-only to the user
    user_lines = [args for word, args in steps if word == "USER"]
    if not user_lines or user_lines[-1] not in ("jovyan", "1000"):
        problems.append(f"does not end as the notebook user: USER {user_lines[-1] if user_lines else None}")
    if not any(re.search(r"useradd .*--uid 1000 .*jovyan$", run) for run in runs):
        problems.append("no user jovyan with uid 1000")
    for run in runs:
        if re.search(r"\bchown\b", run) and INSTALL in run:
            problems.append(f"changes the install's owner: {run}")
        if re.search(r"\bchmod\b", run) and INSTALL in run and \
                (not re.search(r"\bgo-w\b", run) or re.search(GROUP_OR_OTHER_WRITE, run)):
            problems.append(f"may leave the install writable to others: {run}")
    for word, args in steps:
        if word == "COPY" and "--chown" in args:
            problems.append(f"copies files owned by someone else than root: COPY {args}")
        if word == "ENV" and "LABKIT_HOME" in args:
            problems.append("sets LABKIT_HOME (its default, the user's own place, is right)")
    at_user = [i for i, (word, args) in enumerate(steps) if word == "USER" and args not in ("root", "0")]
    if at_user and any(word == "RUN" and INSTALL in args for word, args in steps[at_user[0]:]):
        problems.append("writes the install after leaving root")
    return problems


def test_image_recipe_is_not_dockerfile():
    # repo2docker's Docker build pack is tried first and looks for <binder dir>/Dockerfile
    # only: a top-level Dockerfile would replace apt.txt, environment.yml and postBuild
    """Image recipe is not named dockerfile which repo2docker would build instead."""
    assert IMAGE.is_file()
    assert not (ROOT / "Dockerfile").exists(), "repo2docker would build it instead of the Binder recipe"


def test_the_image_recipe_has_no_problem():
    assert image_problems(IMAGE.read_text()) == []


@pytest.mark.parametrize("change, says", [
    (("make build \\\n", ""), "no make build"),
    (("bash /opt/labkit/scripts/setup-system.sh", "apt-get install -y gcc make"), "no setup-system.sh run"),
    (('"jupyterhub==${JUPYTERHUB_VERSION}"', "jupyterhub"), "no jupyterhub at the build argument's version"),
    (("RUN make setup \\\n", "RUN pip install -r requirements.txt \\\n && make setup \\\n"),
     "a pip install besides the lock's and the hub's"),
    (("install -y -qq --no-install-recommends tini", "install -y tini gcc"), "a package list of its own"),
    (("USER jovyan\n", "USER jovyan\nUSER root\n"), "does not end as the notebook user"),
    (("--uid 1000", "--uid 1001"), "no user jovyan with uid 1000"),
    (("chmod -R a+rX,go-w /opt/labkit", "chown -R jovyan /opt/labkit"), "changes the install's owner"),
    (("chmod -R a+rX,go-w /opt/labkit", "chmod -R a+rwX /opt/labkit"), "may leave the install writable"),
    (("chmod -R a+rX,go-w /opt/labkit", "chmod -R 777 /opt/labkit"), "may leave the install writable"),
    (("COPY . /opt/labkit", "COPY --chown=1000:100 . /opt/labkit"), "copies files owned by someone else"),
    (("ENV LANG=C.UTF-8", "ENV LANG=C.UTF-8 LABKIT_HOME=/srv/lab"), "sets LABKIT_HOME"),
    (("RUN useradd", "USER jovyan\nRUN touch /opt/labkit/x\nUSER root\nRUN useradd"),
     "writes the install after leaving root"),
    (("RUN make setup \\\n && ", "RUN make build \\\n && make setup \\\n && "), "out of order"),
])
def test_a_broken_image_recipe_is_caught(change, says):
    old, new = change
    text = IMAGE.read_text()
    assert old in text, f"the test's change no longer applies: {old!r}"
    assert any(says in problem for problem in image_problems(text.replace(old, new, 1)))


def test_the_base_is_a_distribution_setup_system_knows_with_python_3_11():
    base = next(args for word, args in instructions(IMAGE.read_text()) if word == "FROM")
    # the Python each base's python3 is (setup-system.sh's --list knows their names)
    python = {"debian:bookworm": (3, 11), "debian:bookworm-slim": (3, 11), "ubuntu:24.04": (3, 12)}
    assert base in python and python[base] >= (3, 11)
    assert setup_system_list(base.split(":")[0])


def test_the_images_jupyterhub_defaults_to_the_locks():
    arg = next(args for word, args in instructions(IMAGE.read_text()) if word == "ARG" and "JUPYTERHUB_VERSION" in args)
    locked = re.search(r"^jupyterhub==(\S+)$", (ROOT / "requirements.txt").read_text(), re.M)
    assert locked and arg == f"JUPYTERHUB_VERSION={locked[1]}"


def test_make_setup_registers_the_kernel():
    """Make setup registers the kernel in the venv the image puts on path."""
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^setup: .*\$\(KERNEL\)", makefile, re.M)
    assert re.search(r"^KERNEL := \$\(VENV\)/share/jupyter/kernels/labkit/kernel.json$", makefile, re.M)
    assert "--sys-prefix --name labkit" in makefile
    env = [args for word, args in instructions(IMAGE.read_text()) if word == "ENV"]
    assert f"PATH={INSTALL}/.venv/bin:$PATH" in env


def dockerignored(path: str, patterns: list[str]) -> bool:
    """Whether .dockerignore's patterns leave `path` (relative, /-separated) out: a pattern
    matches the path or a folder above it; **/ matches at any depth; ! is not used here."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    for pattern in patterns:
        assert not pattern.startswith("!"), "the matcher does not know exceptions"
        for prefix in prefixes:
            if pattern.startswith("**/"):
                if fnmatch.fnmatchcase(prefix, pattern[3:]) or fnmatch.fnmatchcase(prefix, "*/" + pattern[3:]):
                    return True
            elif fnmatch.fnmatchcase(prefix, pattern) and prefix.count("/") == pattern.count("/"):
                return True
    return False


def ignore_patterns() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


@pytest.mark.parametrize("path, left_out", [
    (".venv/bin/python", True), ("build/bin/select", True), ("data/results/proc_top.jsonl", True),
    ("labkit/__pycache__/cli.cpython-311.pyc", True), ("labkit.egg-info/PKG-INFO", True),
    ("notebooks/.ipynb_checkpoints/x.ipynb", True),
    ("data/seeds", False), ("build.py", False), ("labkit/build.py", False), ("scripts/setup-system.sh", False),
])
def test_dockerignore_leaves_out_what_a_machine_made_and_nothing_else(path, left_out):
    assert dockerignored(path, ignore_patterns()) is left_out


def test_every_file_the_image_copies_exists_and_reaches_the_build():
    patterns = ignore_patterns()
    sources = [args.split()[:-1] for word, args in instructions(IMAGE.read_text()) if word == "COPY"]
    assert sources
    for source in (s for group in sources for s in group if not s.startswith("--")):
        assert (ROOT / source).exists(), source
        assert source == "." or not dockerignored(source, patterns), source
    # `COPY .`: every file git tracks reaches the image (and repo2docker's context: it reads .dockerignore too)
    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files"], capture_output=True, text=True, timeout=30)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout")
    assert [path for path in tracked.stdout.splitlines() if dockerignored(path, patterns)] == []


def entrypoint_script() -> list[str]:
    """The image's start command from `sh` on (tini, which runs it, is not installed here)."""
    argv = json.loads(next(args for word, args in instructions(IMAGE.read_text()) if word == "ENTRYPOINT"))
    assert argv[:3] == ["tini", "-g", "--"], "tini as PID 1 reaps the forked servers' orphans"
    return argv[3:]


@pytest.mark.parametrize("home_is_a_folder", [True, False])
def test_start_command_copies_notebooks(tmp_path, home_is_a_folder):
    """The start command copies the notebooks and starts the server anyway."""
    home = tmp_path / "home"
    home.mkdir() if home_is_a_folder else home.write_text("not a folder: the copy must fail")
    env = {**os.environ, "HOME": str(home), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    env.pop("LABKIT_HOME", None)
    server = ["sh", "-c", 'echo "server started: $*"', "server", "--flag"]  # stands for jupyterhub-singleuser
    done = subprocess.run([*entrypoint_script(), *server], capture_output=True, text=True, env=env, timeout=20)
    assert done.returncode == 0, done.stderr
    assert "server started: --flag" in done.stdout
    notebooks = sorted(p.name for p in paths.NOTEBOOKS.glob("*.ipynb"))
    if not home_is_a_folder:
        assert "labkit notebooks failed" in done.stderr
        return
    assert sorted(p.name for p in (home / "lab").glob("*.ipynb")) == notebooks
    edited = home / "lab" / notebooks[0]
    edited.write_text("the student's own")
    again = subprocess.run([*entrypoint_script(), *server], capture_output=True, text=True, env=env, timeout=20)
    assert again.returncode == 0 and f"kept your own {notebooks[0]}" in again.stdout
    assert edited.read_text() == "the student's own"


# ---------------------------------------------------------------------------
# docs/deploy.md: its snippets are valid and its claims about labkit are labkit's own.
# ---------------------------------------------------------------------------

PAGE = ROOT / "docs" / "deploy.md"


def fenced(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", PAGE.read_text(), re.M | re.S)


def test_the_pages_yaml_parses():
    blocks = fenced("yaml")
    assert len(blocks) >= 4
    for block in blocks:
        assert list(yaml.safe_load_all(block)), block


# Zero to JupyterHub's singleuser keys (its values.schema.yaml admits no others; chart 4.x,
# read in July 2026) and hub.extraConfig; extraContainerConfig is not among them.
Z2JH_SINGLEUSER = {
    "podNameTemplate", "extraTolerations", "nodeSelector", "extraNodeAffinity", "extraPodAffinity",
    "extraPodAntiAffinity", "networkTools", "cloudMetadata", "networkPolicy", "events", "extraAnnotations",
    "extraLabels", "extraFiles", "extraEnv", "lifecycleHooks", "initContainers", "extraContainers",
    "allowPrivilegeEscalation", "uid", "fsGid", "serviceAccountName", "storage", "image", "startTimeout", "cpu",
    "memory", "extraResource", "cmd", "defaultUrl", "extraPodConfig", "profileList",
}


def helm_values() -> list[dict]:
    docs = [doc for block in fenced("yaml") for doc in yaml.safe_load_all(block)]
    return [doc for doc in docs if isinstance(doc, dict) and ({"singleuser", "hub"} & doc.keys())]


def test_the_pages_helm_values_use_keys_the_chart_admits():
    values = helm_values()
    assert values
    for doc in values:
        assert set(doc.get("singleuser", {})) <= Z2JH_SINGLEUSER
        assert set(doc.get("hub", {})) <= {"extraConfig"}


# Traits of the spawners that are not installed here, read from their sources: KubeSpawner
# (July 2026), DockerSpawner (March 2026), SystemdSpawner (July 2026).  JupyterHub's own
# come from the installed package.
OTHER_TRAITS = {
    "KubeSpawner": {"container_security_context", "extra_container_config", "extra_pod_config", "cpu_limit",
                    "cpu_guarantee", "cmd", "allow_privilege_escalation"},
    "DockerSpawner": {"image", "extra_host_config", "extra_create_kwargs", "volumes", "cpu_limit", "default_url",
                      "environment"},
    "SystemdSpawner": {"isolate_tmp", "unit_extra_properties", "cpu_limit", "mem_limit", "default_url"},
}


def python_snippets() -> list[str]:
    extra = [code for doc in helm_values() for code in doc.get("hub", {}).get("extraConfig", {}).values()]
    return fenced("python") + extra


def test_the_pages_python_compiles_and_sets_real_traits():
    from jupyterhub.app import JupyterHub
    from jupyterhub.spawner import LocalProcessSpawner, Spawner

    known = {"JupyterHub": set(JupyterHub.class_trait_names()), "Spawner": set(Spawner.class_trait_names()),
             "LocalProcessSpawner": set(LocalProcessSpawner.class_trait_names()), **OTHER_TRAITS}
    snippets = python_snippets()
    assert len(snippets) >= 3
    used = []
    for code in snippets:
        compile(code, "deploy.md", "exec")
        used += re.findall(r"\bc\.(\w+)\.(\w+)\s*=", code)
    inline = re.findall(r"`([^`\n]+)`", PAGE.read_text())  # `c.SystemdSpawner.isolate_tmp = True` in the prose
    used += [found for span in inline for found in re.findall(r"\b(?:c\.)?(\w*Spawner)\.(\w+)\s*=", span)]
    assert {cls for cls, _ in used} >= {"KubeSpawner", "DockerSpawner", "SystemdSpawner", "Spawner"}
    assert [f"{cls}.{trait}" for cls, trait in used if trait not in known.get(cls, ())] == []


def test_every_labkit_command_the_page_shows_is_one_labkit_takes():
    from labkit import cli

    text = PAGE.read_text()
    code = re.findall(r"^```\w*\n(.*?)^```$", text, re.M | re.S) + re.findall(r"`([^`\n]+)`", text)
    shown = [m for piece in code for m in re.findall(r"(?<![\w/.-])labkit((?: +[^\s;&|'`#]+)+)", piece)]
    assert {shlex.split(args)[0] for args in shown} >= {"doctor", "notebooks"}
    for args in shown:
        try:
            cli.parser().parse_args(shlex.split(args))
        except SystemExit:
            pytest.fail(f"`labkit{args}` is not a command labkit takes")


@pytest.mark.parametrize("capability", sorted(confinement.CAPABILITIES))
def test_every_capability_doctor_checks_is_named_on_the_page(capability):
    assert capability in PAGE.read_text()


def source_text(folder: Path) -> str:
    """Python sources with adjacent string literals joined, as Python joins them."""
    text = "\n".join(path.read_text() for path in sorted(folder.rglob("*.py")))
    return re.sub(r"([\"'])\s*\n\s*f?\1", "", text)


def test_page_quotes_are_real_messages():
    """What the page quotes in italics is what labkit or jupyterhub says."""
    import jupyterhub

    said = source_text(ROOT / "labkit") + source_text(Path(jupyterhub.__file__).parent)
    prose = re.sub(r"^```.*?^```$", "", PAGE.read_text(), flags=re.M | re.S)
    prose = re.sub(r"`[^`\n]*`", "", prose)
    quoted = [" ".join(q.split()) for q in re.findall(r"(?<![*\w])\*([^*]+?)\*(?![*\w])", prose)]
    assert len(quoted) >= 10
    assert [q for q in quoted if q not in said] == []
