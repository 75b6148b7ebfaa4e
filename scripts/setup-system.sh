#!/usr/bin/env bash
# The Debian/Ubuntu packages the lab needs.  As root: install what is missing
# (a second run installs nothing and needs no network).  As a user: list what is
# missing with the exact sudo command, then carry on with what can be done.
# Exit status 1 only when the C build cannot work (no gcc or make).
set -euo pipefail

# `setup-system.sh --list ubuntu|debian` prints the packages for that distribution, one per
# line, and installs nothing: binder/apt.txt and the Dockerfile are checked against it
# (tests/install/test_deploy.py), so the list lives here alone.
# `setup-system.sh --tests` installs only what the tests alone need (Node.js and npm, for the
# proxy of tests/install/test_hub.py's JupyterHub): not the lab's, so not in --list (apt.txt, images).
list_only=""
if [[ ${1:-} == --list ]]; then
  list_only=${2:?"usage: setup-system.sh --list ubuntu|debian"}
fi
if [[ ${1:-} == --tests ]]; then
  # Checked by command, not package: NodeSource's nodejs bundles npm and conflicts with Debian's.
  if command -v node >/dev/null && command -v npm >/dev/null; then exit 0; fi
  if (( EUID != 0 )) || ! command -v apt-get >/dev/null; then
    echo "note: the hub test needs Node.js 18 or newer and npm: sudo apt-get install -y nodejs npm"
    exit 0
  fi
  echo "system packages for the tests: installing nodejs npm"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm ||
    echo "warning: apt-get could not install nodejs npm; the hub test will fail saying so"
  exit 0
fi

# Which distribution: read in a subshell so os-release cannot clobber our names.
os_release=${OS_RELEASE_FILE:-/etc/os-release}   # overridable for the tests
distro=$( . "$os_release" 2>/dev/null && echo "${ID:-} ${ID_LIKE:-}" || true)
[[ -n $list_only ]] && distro=$list_only

# Without these the lab cannot be built at all.
required=(gcc make python3-venv python3-dev libffi-dev)
# Without these the lab falls back and says so (no perf counters, no browser test, ...).
useful=(liburing-dev iproute2 procps strace sockperf iperf3 netcat-openbsd fonts-dejavu-core)

case " $distro " in
  *" ubuntu "*)
    # perf lives in linux-tools; the kernel-specific package may not exist
    # (custom or WSL kernels), so it is added only when apt knows it.
    useful+=(linux-tools-common linux-tools-generic)
    kernel_tools="linux-tools-$(uname -r)"
    # Ubuntu's chromium-browser is only a wrapper around a snap, which cannot run
    # headless under CI or as root; the browser test needs a real /usr/bin/chromium.
    if [[ -z $list_only && ! -x /usr/bin/chromium ]]; then
      echo "note: no /usr/bin/chromium. Ubuntu ships Chromium only as a snap, which is not usable"
      echo "      headless in CI; the browser test will be skipped (everything else works)."
    fi
    ;;
  *" debian "*)
    useful+=(linux-perf chromium)
    kernel_tools=""
    ;;
  *)
    if [[ -n $list_only ]]; then
      echo "error: --list knows ubuntu and debian, not '$list_only'" >&2
      exit 2
    fi
    echo "note: not Debian or Ubuntu ($os_release says '${distro}'). Install by hand the equivalents of:"
    echo "      ${required[*]} ${useful[*]} perf chromium"
    required=() useful=() kernel_tools=""
    apt_based=no
    ;;
esac

# pandas 3 and numpy 2.4 need Python 3.11 or newer; Ubuntu 22.04's python3 is 3.10
# but the release also ships python3.11 (the Makefile picks it up).
if [[ -z $list_only && ${apt_based:-yes} == yes ]] && ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  required+=(python3.11 python3.11-venv python3.11-dev)
fi

if [[ -n $list_only ]]; then
  # the kernel-specific linux-tools package is left out: an image's build host is not its kernel
  printf '%s\n' "${required[@]}" "${useful[@]}"
  exit 0
fi

is_installed() {
  [[ $(dpkg-query -W -f='${Status}' "$1" 2>/dev/null) == *" installed" ]]
}

has_candidate() {
  local policy
  policy=$(apt-cache policy "$1" 2>/dev/null)
  [[ -n $policy && $policy != *"Candidate: (none)"* ]]
}

missing=()
for pkg in "${required[@]}" "${useful[@]}"; do
  is_installed "$pkg" || missing+=("$pkg")
done
if [[ -n $kernel_tools ]] && ! is_installed "$kernel_tools"; then
  missing+=("$kernel_tools")
fi

if [[ ${apt_based:-yes} == no ]]; then
  :   # nothing we can check or install here
elif (( ${#missing[@]} == 0 )); then
  echo "system packages: all present"
elif (( EUID == 0 )); then
  echo "system packages: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  installable=()
  for pkg in "${missing[@]}"; do
    if has_candidate "$pkg"; then installable+=("$pkg")
    else echo "warning: apt has no package '$pkg' on this release; skipping it"; fi
  done
  if (( ${#installable[@]} )); then
    apt-get install -y -qq --no-install-recommends "${installable[@]}" ||
      echo "warning: apt-get install failed; the lab goes on with what is installed"
  fi
else
  echo "system packages missing: ${missing[*]}"
  echo "  install them with:"
  echo "    sudo apt-get install -y --no-install-recommends ${missing[*]}"
  echo "  (or run: sudo bash scripts/setup-system.sh).  Continuing without them:"
  echo "  the lab says what it cannot measure when perf or chromium is missing."
fi

# The one thing the lab cannot do without: a C compiler and make.
for tool in gcc make; do
  if ! command -v "$tool" >/dev/null; then
    echo "error: '$tool' is not installed, so the C servers cannot be built." >&2
    echo "  fix: sudo apt-get install -y gcc make   (then run make again)" >&2
    exit 1
  fi
done
