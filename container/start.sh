#!/bin/sh
# The lab container's start command (container/Containerfile's ENTRYPOINT, under tini).
#
# Invariants:
# - The notebooks reach LABKIT_HOME (the host's folder) at every start; `labkit notebooks`
#   copies only those not there yet, so a student's edited notebook is never replaced.
# - JupyterLab never starts without a token: JUPYTER_TOKEN when the host gave one (lab.sh
#   does), else one made here; the URL with it is printed and kept in
#   $LABKIT_HOME/.jupyter-url (mode 600) for a dev container, whose editor shows no log.
# - Any other command (`podman run ... labkit-lab labkit doctor`) runs as given.
set -eu
home=${LABKIT_HOME:-/lab}
mkdir -p "$home"
labkit notebooks "$home/notebooks" >/dev/null ||
  echo "labkit notebooks failed: the notebooks are in /opt/labkit/notebooks" >&2

if [ "$#" -ge 2 ] && [ "$1" = jupyter ] && [ "$2" = lab ]; then
  shift 2
  if [ -z "${JUPYTER_TOKEN:-}" ]; then
    JUPYTER_TOKEN=$(python3 -c 'import secrets; print(secrets.token_hex(24))')
    export JUPYTER_TOKEN
  fi
  port=${LAB_PORT:-8888}
  url="http://127.0.0.1:$port/lab?token=$JUPYTER_TOKEN"
  (umask 077 && echo "$url" >"$home/.jupyter-url")
  echo "The lab: open $url in your browser."
  # --ip=0.0.0.0: the container's own network only; the host publishes it on its 127.0.0.1.
  exec jupyter lab --allow-root --no-browser --ip=0.0.0.0 --port=8888 --ServerApp.port_retries=0 \
    --ServerApp.root_dir="$home" "$@"
fi
exec "$@"
