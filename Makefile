# The lab's two commands: `make lab` (open JupyterLab) and `make test`.
# The other targets are their steps; `make help` lists them all.

# The first Python 3.11+ found (pandas 3 needs it; Ubuntu 22.04's python3 is 3.10).
# The distribution's own comes first: every user can run it, which grading needs
# (each graded notebook runs under a uid of its own), unlike a pyenv under /root.
PYTHON       ?= $(firstword $(foreach py,/usr/bin/python3 /usr/bin/python3.13 /usr/bin/python3.12 \
                  /usr/bin/python3.11 python3 python3.13 python3.12 python3.11,\
                  $(shell $(py) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null && echo $(py))))
JUPYTER_ARGS ?=
# `make lab` in a container (container/lab.sh: Podman or Docker) where the host is not Linux,
# or on Linux on request: make lab CONTAINER=1.  CONTAINER=0 keeps any host on the recipe below.
CONTAINER    ?= $(if $(filter Linux,$(shell uname -s)),0,1)
PYTEST_ARGS  ?=
# Two pytest-xdist workers per CPU, at most 16 (why: docs/contributors/testing.md).
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); echo $$(( 2 * n < 16 ? 2 * n : 16 )))

VENV   := .venv
STAMP  := $(VENV)/.installed
KERNEL := $(VENV)/share/jupyter/kernels/labkit/kernel.json
# JupyterLab's settings for the lab: no "news from Jupyter?" prompt over every page, no update check.
LAB_SETTINGS := $(VENV)/share/jupyter/lab/settings/overrides.json
PIP    := $(VENV)/bin/pip --disable-pip-version-check

# JupyterLab refuses to run as root (containers, CI) unless told it may.
ifeq ($(shell id -u),0)
ALLOW_ROOT := --allow-root
endif

# The steps depend on each other's side effects (apt installs gcc before the build).
.NOTPARALLEL:
.PHONY: help setup system build lab test lock clean distclean container-check arm64-check container-image

help:
	@echo "make lab        set up, build, then open JupyterLab on notebooks/"
	@echo "                  (remote or headless: make lab JUPYTER_ARGS='--no-browser --ip=127.0.0.1')"
	@echo "make lab CONTAINER=1  the same in a container (Podman or Docker; the default off Linux)"
	@echo "make test       set up, build, then run the tests (PYTEST_ARGS='-m \"not browser\"' to narrow)"
	@echo "make setup      system packages (scripts/setup-system.sh), .venv, the 'labkit' Jupyter kernel"
	@echo "make build      compile the C servers and load generator into build/bin/"
	@echo "make lock       write requirements.txt anew: the newest versions pyproject.toml admits"
	@echo "make clean      remove build/ and caches (keeps .venv and data/results/)"
	@echo "make distclean  clean, and remove .venv too"
	@echo "make container-check  build the container's image and check the lab in it (slow; Podman, as root)"
	@echo "make arm64-check      cross-compile the C for aarch64 and run its tests under qemu-user"
	@echo "make container-image ARCH=arm64  the container's image for amd64 or arm64 (a foreign one through qemu-user)"

setup: system $(STAMP) $(KERNEL) $(LAB_SETTINGS)

system:
	@bash scripts/setup-system.sh

# The venv is reinstalled only when the lock or the package metadata change.  It holds the
# lock exactly, then labkit on top; pip check fails if the lock breaks pyproject.toml's ranges.
# --no-deps: the lock is complete, and it leaves out on purpose what an extra would bring
# back (scripts/lock-leaves-out.txt says what and why).
$(STAMP): requirements.txt pyproject.toml
	@test -n "$(PYTHON)" || { echo "error: the lab needs Python 3.11 or newer." \
	  "Fix: sudo apt-get install python3.11-venv python3.11-dev (or set PYTHON=/path/to/python3.11)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --no-deps -r requirements.txt
	$(PIP) install -q --no-deps --no-build-isolation -e .
	$(PIP) check
	@touch $@

# The lock, anew: the newest versions pyproject.toml's ranges admit (needs the package index).
lock:
	@PYTHON=$(PYTHON) bash scripts/lock.sh

$(KERNEL): $(STAMP)
	$(VENV)/bin/python -m ipykernel install --sys-prefix --name labkit --display-name "Python (labkit)"

$(LAB_SETTINGS): scripts/jupyterlab-overrides.json $(STAMP)
	@mkdir -p $(dir $@)
	cp scripts/jupyterlab-overrides.json $@

build:
	$(MAKE) -C csrc BUILD=$(CURDIR)/build

# tests/install/test_hub.py's proxy: JupyterHub's configurable-http-proxy from npm, exactly as
# tests/hub/package-lock.json pins it, in the venv (make clean keeps it; no network later).
# Node.js is the tests' alone, not the lab's: setup-system.sh --tests installs it as root;
# without it, make test says what to install and goes on, and test_hub fails with the same fix.
HUB_PROXY := $(VENV)/hub-proxy/.installed
$(HUB_PROXY): tests/hub/package.json tests/hub/package-lock.json
	@bash scripts/setup-system.sh --tests
	@if ! command -v npm >/dev/null || ! command -v node >/dev/null; then \
	  echo "note: no Node.js/npm, so tests/install/test_hub.py has no proxy and will fail." \
	    "Fix: sudo apt-get install -y nodejs npm (Node.js 18 or newer), then make test"; \
	else \
	  mkdir -p $(dir $@) && cp tests/hub/package.json tests/hub/package-lock.json $(dir $@) && \
	  npm ci --prefix $(dir $@) --no-audit --no-fund --loglevel=error && touch $@; \
	fi

# JupyterLab's file browser shows the user's whole lab, not notebooks/ alone: the C files a
# student edits and hands in (csrc/servers/mine.c, ...) are beside the notebooks.  Its root is
# the user's lab (labkit.paths.HOME: this checkout, or a shared install's LABKIT_HOME).
ifeq ($(CONTAINER),1)
lab:
	@bash container/lab.sh
else
lab: setup build
	@echo "JupyterLab prints a URL with ?token=...: open that URL in your browser."
	@echo "Stop it with Ctrl-C (twice)."
	@home=$$($(VENV)/bin/python -c 'from labkit import paths; print(paths.HOME)'); \
	echo "JupyterLab's file browser: $$home (notebooks/ for the notebooks, csrc/ for the C)"; \
	$(VENV)/bin/jupyter lab $(ALLOW_ROOT) $(JUPYTER_ARGS) --ServerApp.root_dir="$$home"
endif

# Slow, so not in make test: the container's image built and the lab checked in it
# (container/check.sh), and the C cross-compiled for aarch64 and tested under qemu-user.
container-check:
	@bash container/check.sh

arm64-check:
	@bash scripts/arm64-check.sh

# The image for one architecture (container/image.sh; default: this machine's).
container-image:
	@bash container/image.sh $(ARCH)

# The suite in three phases after ruff (tests/conftest.py): `quiet` alone; then the serial
# phase first in line for the CPUs (scripts/first-in-line.sh) beside the parallel phase, or
# one after the other where it cannot be; exit status 5 (nothing selected) is no failure.
# The reasons and their measurements: docs/contributors/testing.md.
TEST_RESULTS := build/test-results
PHASE = $(VENV)/bin/pytest --phase $(1) --junitxml=$(TEST_RESULTS)/$(1).xml
SERIAL_PHASE := $(call PHASE,serial) -p no:xdist $(PYTEST_ARGS)
PARALLEL_PHASE := $(call PHASE,parallel) -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)
test: setup build $(HUB_PROXY)
	@rm -rf $(TEST_RESULTS); mkdir -p $(TEST_RESULTS); status=0; \
	$(VENV)/bin/ruff check --quiet . || { echo "ruff: the lines above break the code's rules (pyproject.toml)"; status=1; }; \
	export LABKIT_TEST_RUN=make$$$$; unset PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX; \
	passed() { [ $$1 -eq 0 ] || [ $$1 -eq 5 ]; }; \
	$(call PHASE,quiet) -p no:xdist $(PYTEST_ARGS); passed $$? || status=1; \
	if bash scripts/first-in-line.sh --check; then \
	  echo "== the serial phase, first in line for the CPUs, beside the parallel phase (its output after)"; \
	  ready=$(TEST_RESULTS)/first-in-line-runs; \
	  bash scripts/first-in-line.sh $(VENV)/bin/python tests/quickrun.py --ready $$ready & made=$$!; \
	  while [ ! -e $$ready ] && kill -0 $$made 2>/dev/null; do sleep 0.1; done; \
	  $(PARALLEL_PHASE) >$(TEST_RESULTS)/parallel.log 2>&1 & parallel=$$!; \
	  wait $$made; \
	  bash scripts/first-in-line.sh $(SERIAL_PHASE); passed $$? || status=1; \
	  wait $$parallel; code=$$?; echo "== the parallel phase"; cat $(TEST_RESULTS)/parallel.log; passed $$code || status=1; \
	else \
	  echo "== the serial phase, then the parallel phase"; \
	  $(SERIAL_PHASE); passed $$? || status=1; \
	  $(PARALLEL_PHASE); passed $$? || status=1; \
	fi; \
	rm -rf "$${TMPDIR:-/tmp}/labkit-quick-$$LABKIT_TEST_RUN"; \
	$(VENV)/bin/python scripts/slowest.py $(TEST_RESULTS)/quiet.xml $(TEST_RESULTS)/serial.xml \
	  $(TEST_RESULTS)/parallel.xml; \
	exit $$status

clean:
	rm -rf build .pytest_cache
	find . -path ./.venv -prune -o -name __pycache__ -type d -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV)
