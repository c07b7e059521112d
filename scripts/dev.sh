#!/usr/bin/env bash
# Set up a local venv with everything the project needs, then run the demo or the tests.
#   scripts/dev.sh demo [vlr demo args...]   # the main job
#   scripts/dev.sh test [pytest args...]     # the test suite
# torch/torchvision are installed first and pinned by constraints.txt (PyPI's
# torchvision does not work beside other torch builds); pip, not uv.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY=${PYTHON:-python3}

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
stamp="$VENV/.vlr-installed"
want=$(cat constraints.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -c constraints.txt -r <(grep -E '^(torch|torchvision)==' constraints.txt)
  "$VENV/bin/python" -m pip install -q -c constraints.txt -e ".[all,test]"
  echo "$want" > "$stamp"
fi

cmd=${1:-}
shift || true
case "$cmd" in
  demo) exec "$VENV/bin/vlr" demo "$@" ;;
  test) HF_HUB_OFFLINE=1 exec "$VENV/bin/python" -m pytest "$@" ;;
  *) echo "usage: scripts/dev.sh demo|test [args...]" >&2; exit 2 ;;
esac
