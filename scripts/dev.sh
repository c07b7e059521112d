#!/usr/bin/env bash
# Set up a local venv with everything the project needs, then run the demo or the tests.
#   scripts/dev.sh demo [vlr demo args...]   # the main job
#   scripts/dev.sh test [pytest args...]     # the test suite
#   scripts/dev.sh test-lavis [pytest args...]  # the LAVIS suite, in its own venv (.venv-lavis)
# torch/torchvision are installed first and pinned by constraints.txt (PyPI's
# torchvision does not work beside other torch builds); pip, not uv.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY=${PYTHON:-python3}

main_env() {
  if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
  fi
  local stamp="$VENV/.vlr-installed" want
  want=$(cat constraints.txt pyproject.toml | sha256sum | cut -d' ' -f1)
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    "$VENV/bin/python" -m pip install -q --upgrade pip
    "$VENV/bin/python" -m pip install -q -c constraints.txt -r <(grep -E '^(torch|torchvision)==' constraints.txt)
    "$VENV/bin/python" -m pip install -q -c constraints.txt -e ".[all,test,ray,mteb]"
    # DeepSpeed (the `deepspeed` extra: CaRe's ZeRO-2 recipe, run on CPU processes by the tests) builds
    # against the installed torch, so without build isolation, with setuptools' own bdist_wheel; the
    # requirement is the extra's, read from pyproject.toml
    local deepspeed
    deepspeed=$("$VENV/bin/python" -c 'import tomllib; extra = tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["deepspeed"]; print(next(r for r in extra if r.startswith("deepspeed")))')
    "$VENV/bin/python" -m pip install -q -c constraints.txt "setuptools>=70.1" wheel
    "$VENV/bin/python" -m pip install -q --no-build-isolation -c constraints.txt "$deepspeed"
    echo "$want" > "$stamp"
  fi
}

# LAVIS (salesforce-lavis 1.0.2) pins transformers<4.27 and timm==0.4.12: its own venv,
# built from constraints-lavis.txt, only for the LAVIS suite (docs/lavis.md).
lavis_env() {
  LVENV=${LAVIS_VENV:-.venv-lavis}
  if [ ! -x "$LVENV/bin/python" ]; then
    "$PY" -m venv "$LVENV"
  fi
  local lstamp="$LVENV/.vlr-installed" lwant
  lwant=$(cat constraints-lavis.txt pyproject.toml | sha256sum | cut -d' ' -f1)
  if [ ! -f "$lstamp" ] || [ "$(cat "$lstamp")" != "$lwant" ]; then
    "$LVENV/bin/python" -m pip install -q --upgrade pip
    "$LVENV/bin/python" -m pip install -q -c constraints-lavis.txt -r <(grep -E '^(torch|torchvision)==' constraints-lavis.txt)
    "$LVENV/bin/python" -m pip install -q -c constraints-lavis.txt -e ".[lavis,test]"
    echo "$lwant" > "$lstamp"
  fi
}

cmd=${1:-}
shift || true
case "$cmd" in
  demo) main_env; exec "$VENV/bin/vlr" demo "$@" ;;
  # one worker per core (VLR_TEST_WORKERS=N to choose, 0 for none), each taking whole test files, so a
  # module's fixtures are built once; the suite's own multi-process tests (torchrun, Ray) still run
  test) main_env; HF_HUB_OFFLINE=1 exec "$VENV/bin/python" -m pytest -n "${VLR_TEST_WORKERS:-auto}" --dist loadfile "$@" ;;
  test-lavis)
    lavis_env
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 exec "$LVENV/bin/python" -m pytest tests/integrations/lavis \
      tests/data/test_trainer_datasets.py "$@" ;;
  *) echo "usage: scripts/dev.sh demo|test|test-lavis [args...]" >&2; exit 2 ;;
esac
