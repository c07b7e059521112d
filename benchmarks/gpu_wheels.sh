#!/usr/bin/env bash
# Download, on this machine, the wheels that benchmarks/gpu_check.sh installs on the GPU machine
# (which has no network): benchmarks/gpu_wheels.txt into .whl/main, benchmarks/gpu_wheels_lavis.txt
# into .whl/lavis. Wheels for CPython 3.12 on x86-64 Linux, without dependencies (the lists name
# every one that is needed). A package published only as source is built here into a wheel, which
# must come out pure Python (py3-none-any), else the script stops.
#   benchmarks/gpu_wheels.sh            # then pass carry [".whl"] to the device tool
# .whl/ is ignored by git; the whole tree that travels must stay under 64 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=${VLR_WHEELS:-.whl}
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64)

fetch() {  # fetch LIST DIR
  local list=$1 dir=$2 req tmp
  rm -rf "$dir"
  mkdir -p "$dir"
  while read -r req; do
    req=${req%%#*}
    req=${req//[[:space:]]/}
    [ -n "$req" ] || continue
    if "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        "${PLATFORMS[@]}" -d "$dir" "$req" 2>/dev/null; then
      continue
    fi
    echo "gpu_wheels: $req has no wheel for CPython 3.12 x86-64; building it from source" >&2
    tmp=$(mktemp -d)
    "$PY" -m pip wheel -q --no-deps --no-binary=:all: -w "$tmp" "$req"
    case $(ls "$tmp") in
      *-none-any.whl) ;;
      *) echo "gpu_wheels: $req built into $(ls "$tmp"), not a pure-Python wheel: it would not run there" >&2
         exit 1 ;;
    esac
    mv "$tmp"/*.whl "$dir"/
    rm -rf "$tmp"
  done < "$list"
}

fetch benchmarks/gpu_wheels.txt "$OUT/main"
fetch benchmarks/gpu_wheels_lavis.txt "$OUT/lavis"
du -sh "$OUT/main" "$OUT/lavis" "$OUT"
echo "gpu_wheels: $(find "$OUT/main" -name '*.whl' | wc -l) main and $(find "$OUT/lavis" -name '*.whl' | wc -l)" \
  "LAVIS wheels in $OUT/"
