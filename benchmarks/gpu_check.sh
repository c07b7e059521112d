#!/usr/bin/env bash
# The one-shot GPU check (docs/benchmarks.md, "GPU check"). On a machine with CUDA it
#   1. installs the carried wheels (.whl/main, .whl/lavis, made by benchmarks/gpu_wheels.sh)
#      into two --target folders (nothing is built there),
#   2. runs every test marked `gpu` with VLR_REQUIRE_GPU=1, so that a skip is a failure:
#      the LAVIS ones (tests/integrations/lavis) in their own process, over the LAVIS overlay,
#      (among them the CUDA paths of issues 25 and 27: CaRe on FSDP and DeepSpeed, `vlr mine`,
#      `vlr precompute` with shards, `vlr caption` batching),
#   3. runs benchmarks/retrieval_recall.py on CUDA at COCO-5K, 10K x 50K (with the peer,
#      CLIP_benchmark's recall_at_k) and COCO-train2017 size, benchmarks/train_step.py
#      (C5's step, text-only against frozen ViT, BLIP-base shapes), benchmarks/mllm_embed.py
#      (EOL embedding, bf16, small and base configs), benchmarks/scaling.py --device cuda
#      (issue 25: `vlr precompute --device cuda` against its tower's forward rate, images and videos)
#      and benchmarks/caption_batch.py (issue 27: `vlr caption`'s batches against one clip at a time),
#   4. writes OUTDIR/summary.json and OUTDIR/summary.md (benchmarks/gpu_summary.py), beside
#      gpu_check.log (everything printed), retrieval_recall.json, train_step.json, mllm_embed.json,
#      scaling.json and caption_batch.json: eight files, whatever the number of tests (the device tool
#      brings back at most 8).
# Under 10 minutes on one H200, installs included (each step has a time cap; together 9.5 min).
#   bash benchmarks/gpu_check.sh OUTDIR              # exit 0 only if everything ran and passed
#   bash benchmarks/gpu_check.sh --dry-run [OUTDIR]  # any machine: what would run, nothing run
# Without CUDA it stops at once, exit 3, saying why. A new GPU test needs only the `gpu` marker:
# the files to run are found by it (no module-level importorskip there: import inside the test).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
PY=${PYTHON:-python3}
WHEELS=${VLR_WHEELS:-$ROOT/.whl}
SITE=${VLR_SITE:-/tmp/vlr-gpu-site}
SITE_LAVIS=${VLR_SITE_LAVIS:-/tmp/vlr-gpu-site-lavis}
STUBS=$ROOT/benchmarks/gpu_stubs
# caps in seconds: together 550 s, with the installs (~15 s) under 10 minutes
T_MAIN=${VLR_GPU_T_MAIN:-205}
T_LAVIS=${VLR_GPU_T_LAVIS:-90}
T_BENCH=${VLR_GPU_T_BENCH:-80}
T_TRAIN=${VLR_GPU_T_TRAIN:-40}
T_EMBED=${VLR_GPU_T_EMBED:-45}
T_SCALING=${VLR_GPU_T_SCALING:-70}
T_CAPTION=${VLR_GPU_T_CAPTION:-20}
T_TEST=120  # pytest-timeout, per test of the main process
MAIN_PATH=$ROOT/src:$SITE
LAVIS_PATH=$ROOT/src:$SITE_LAVIS:$STUBS:$SITE  # LAVIS' transformers 4.x and timm 0.4.12 first
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
EMBED_ARGS="--device cuda --dtype bfloat16 --configs small base"
SCALING_ARGS="--parts pipeline --device cuda --rounds 1"
CAPTION_ARGS="--device cuda --dtype bfloat16 --configs small base --n 8 --repeat 1"

DRY=0
if [ "${1:-}" = "--dry-run" ]; then
  DRY=1
  shift
fi
OUTDIR=${1:-}
if [ -z "$OUTDIR" ] && [ "$DRY" = 0 ]; then
  echo "usage: bash benchmarks/gpu_check.sh OUTDIR | --dry-run [OUTDIR]" >&2
  exit 2
fi

mapfile -t GPU_FILES < <(grep -rlE --include='test_*.py' '\bmark\.gpu\b' tests | sort)
MAIN_FILES=()
LAVIS_FILES=()
for f in "${GPU_FILES[@]}"; do
  case $f in
    tests/integrations/lavis/*) LAVIS_FILES+=("$f") ;;
    *) MAIN_FILES+=("$f") ;;
  esac
done

wheels_line() {  # wheels_line NAME TARGET
  local dir=$WHEELS/$1 n
  n=$(find "$dir" -maxdepth 1 -name '*.whl' 2>/dev/null | wc -l)
  if [ "$n" = 0 ]; then
    echo "$dir: NO WHEELS (run benchmarks/gpu_wheels.sh where pip reaches PyPI, then carry .whl)"
  else
    echo "$dir: $n wheels, $(du -sh "$dir" | cut -f1) -> pip install --no-index --no-deps --target $2"
  fi
}

if [ "$DRY" = 1 ]; then
  rc=0
  echo "gpu_check --dry-run: nothing is run; on the GPU machine it would, with $PY ($("$PY" -V 2>&1)):"
  echo "1. install the carried wheels"
  echo "   $(wheels_line main "$SITE")"
  echo "   $(wheels_line lavis "$SITE_LAVIS")"
  echo "2. pytest -m gpu, VLR_REQUIRE_GPU=1 (a skip fails), cap ${T_MAIN}s, PYTHONPATH=$MAIN_PATH:"
  for group in MAIN LAVIS; do
    if [ "$group" = LAVIS ]; then
      echo "3. pytest -m gpu in the LAVIS process, VLR_REQUIRE_GPU=1, cap ${T_LAVIS}s, PYTHONPATH=$LAVIS_PATH:"
      files=("${LAVIS_FILES[@]}")
    else
      files=("${MAIN_FILES[@]}")
    fi
    if [ "${#files[@]}" = 0 ]; then
      echo "   NO gpu-marked test file found"
      rc=1
      continue
    fi
    # collected here (no CUDA needed to collect), with this machine's packages
    if ! "$PY" -c "import torch, pytest" 2>/dev/null; then
      echo "   NOT COLLECTED: $PY cannot import torch and pytest here; give PYTHON=<an interpreter with"
      echo "   the test dependencies>, e.g. PYTHON=.venv/bin/python (scripts/dev.sh test makes it)"
      rc=1
      continue
    fi
    VLR_REQUIRE_GPU=1 PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m pytest --collect-only -q \
      -m gpu -p no:cacheprovider "${files[@]}" 2>&1 | grep -v '^$' | sed 's/^/   /'
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
  done
  echo "4. benchmark, cap ${T_BENCH}s: $PY benchmarks/retrieval_recall.py --device cuda --json ${OUTDIR:-OUTDIR}/retrieval_recall.json"
  echo "   floor, chunk and engine in fp32/fp16/bf16 at 5,000 x 25,000 (also rows, full), 10,000 x 50,000"
  echo "   (also peer) and 118,287 x 591,753"
  echo "   then, cap ${T_TRAIN}s: $PY benchmarks/train_step.py --device cuda --rounds 1 --steps 10 --json ${OUTDIR:-OUTDIR}/train_step.json"
  echo "   then, cap ${T_EMBED}s: $PY benchmarks/mllm_embed.py $EMBED_ARGS --json ${OUTDIR:-OUTDIR}/mllm_embed.json"
  echo "   then, cap ${T_SCALING}s: $PY benchmarks/scaling.py $SCALING_ARGS --json ${OUTDIR:-OUTDIR}/scaling.json"
  echo "   then, cap ${T_CAPTION}s: $PY benchmarks/caption_batch.py $CAPTION_ARGS --json ${OUTDIR:-OUTDIR}/caption_batch.json"
  echo "5. summary: ${OUTDIR:-OUTDIR}/summary.json and summary.md (benchmarks/gpu_summary.py)"
  [ "$rc" = 0 ] || echo "gpu_check --dry-run: collection FAILED (above)" >&2
  exit "$rc"
fi

mkdir -p "$OUTDIR" || exit 2
OUTDIR=$(cd "$OUTDIR" && pwd)
LOG=$OUTDIR/gpu_check.log
rm -f "$OUTDIR"/retrieval_recall.json "$OUTDIR"/train_step.json "$OUTDIR"/mllm_embed.json "$OUTDIR"/scaling.json "$OUTDIR"/caption_batch.json \
  "$OUTDIR"/summary.json "$OUTDIR"/summary.md
: > "$LOG"
STEPS=$(mktemp)
STARTED=$(date +%s)

say() { echo "gpu_check: $*" | tee -a "$LOG" >&2; }
step() {  # step NAME STATUS RC SECONDS NOTE: one JSON line for the summary
  "$PY" -c 'import json, sys; n, s, rc, t, note = sys.argv[1:]
print(json.dumps({"step": n, "status": s, "rc": int(rc), "seconds": float(t), "note": note}))' "$@" >> "$STEPS"
  say "step $1: $2${5:+ ($5)}"
}
summary() {
  "$PY" benchmarks/gpu_summary.py "$OUTDIR" --steps "$STEPS" ${JUNIT:+--junit "$JUNIT"} --started "$STARTED" \
    --site main="$SITE" --site lavis="$SITE_LAVIS" 2>&1 | tee -a "$LOG"
  return "${PIPESTATUS[0]}"
}

# ---------------------------------------------------------------- CUDA, or stop here
probe=$("$PY" -c 'import sys, torch
ok = torch.cuda.is_available()
print(f"torch {torch.__version__}, CUDA build {torch.version.cuda}: "
      + (torch.cuda.get_device_name(0) if ok else "no CUDA device visible (torch.cuda.is_available() is False)"))
sys.exit(0 if ok else 1)' 2>&1)
rc=$?
probe=${probe##*$'\n'}
if [ "$rc" != 0 ]; then
  step cuda failed "$rc" 0 "$probe"
  summary > /dev/null
  say "FAILED: this check needs a CUDA GPU and found none: $probe"
  say "nothing was run. Run it on the GPU machine (docs/benchmarks.md, \"GPU check\"); --dry-run lists the plan."
  exit 3
fi
step cuda ok 0 0 "$probe"
nvidia-smi >> "$LOG" 2>&1

# MMEngine's Runner imports distutils (collect_env), which Python 3.12 has only through
# setuptools' distutils-precedence.pth; should that be missing, alias setuptools' copy.
if ! "$PY" -c 'import distutils' 2> /dev/null && "$PY" -c 'import setuptools._distutils' 2> /dev/null; then
  mkdir -p /tmp/vlr-gpu-distutils/distutils
  echo 'import sys, setuptools._distutils as d; sys.modules[__name__] = d' > /tmp/vlr-gpu-distutils/distutils/__init__.py
  MAIN_PATH=$MAIN_PATH:/tmp/vlr-gpu-distutils
  LAVIS_PATH=$LAVIS_PATH:/tmp/vlr-gpu-distutils
  step distutils ok 0 0 "no distutils module: aliased setuptools._distutils (/tmp/vlr-gpu-distutils)"
fi

# ---------------------------------------------------------------- carried wheels
install() {  # install NAME TARGET
  local dir=$WHEELS/$1 t0=$SECONDS rc
  local files=("$dir"/*.whl)
  if [ ! -e "${files[0]}" ]; then
    step "install-$1" missing 1 0 "no wheels in $dir: run benchmarks/gpu_wheels.sh where pip reaches PyPI, and carry .whl"
    return 1
  fi
  rm -rf "$2"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$2" "${files[@]}" \
    >> "$LOG" 2>&1
  rc=$?
  rm -rf "$2/tests" "$2/benchmarks"  # top-level folders that some wheels ship (fairscale): never ours
  step "install-$1" "$([ "$rc" = 0 ] && echo ok || echo failed)" "$rc" $((SECONDS - t0)) "${#files[@]} wheels -> $2"
  return "$rc"
}
install main "$SITE"
install lavis "$SITE_LAVIS"
lavis_installed=$?

# ---------------------------------------------------------------- tests marked gpu
# One pytest process per file: a file that cannot even be collected (a missing package in a
# conftest stops pytest whole) costs only its own tests, and no CUDA state leaks between files.
run_tests() {  # run_tests GROUP DEADLINE PER_TEST PYTHONPATH FILE
  local group=$1 deadline=$2 per_test=$3 path=$4 file=$5 t0=$SECONDS rc status left out
  left=$((deadline - SECONDS))
  if [ "$left" -lt 15 ]; then
    step "tests $file" "not run: the ${group} tests' time cap was spent" 1 0 ""
    return
  fi
  say "pytest -m gpu $file (cap ${left}s)"
  out=$(mktemp)
  VLR_REQUIRE_GPU=1 PYTHONPATH=$path timeout -k 10 "$left" "$PY" -m pytest -m gpu -rA -p no:cacheprovider \
    --timeout "$per_test" --junitxml "$JUNIT/$(echo "$file" | tr / _).xml" "$file" 2>&1 | tee -a "$LOG" "$out"
  rc=${PIPESTATUS[0]}
  case $rc in
    0) status=ok ;;
    124 | 137) status="timed out after ${left}s" ;;
    *) status="failed (pytest exit $rc)" ;;
  esac
  step "tests $file" "$status" "$rc" $((SECONDS - t0)) "$(grep -v '^\s*$' "$out" | tail -n 1 | tr -d '=' | sed 's/^ *//; s/ *$//' | cut -c1-300)"
  rm -f "$out"
}
JUNIT=$(mktemp -d)
if [ "${#MAIN_FILES[@]}" = 0 ]; then
  step tests failed 1 0 "no gpu-marked test file under tests/"
fi
deadline=$((SECONDS + T_MAIN))
for f in "${MAIN_FILES[@]}"; do
  run_tests main "$deadline" "$T_TEST" "$MAIN_PATH" "$f"
done

if [ "${#LAVIS_FILES[@]}" = 0 ]; then
  step "tests LAVIS" failed 1 0 "no gpu-marked test file under tests/integrations/lavis"
elif [ "$lavis_installed" != 0 ]; then
  step "tests LAVIS" "not runnable on the device" 1 0 "the LAVIS overlay is not installed (step install-lavis)"
else
  lavis_probe=$(PYTHONPATH=$LAVIS_PATH "$PY" -W ignore -c 'import lavis.tasks, transformers, timm
import lavis.runners.runner_base, vlr_plugins.integrations.lavis
print(f"LAVIS imports: transformers {transformers.__version__}, timm {timm.__version__}")' 2>&1)
  rc=$?
  lavis_probe=${lavis_probe##*$'\n'}
  if [ "$rc" != 0 ]; then
    step "tests LAVIS" "not runnable on the device" "$rc" 0 "importing LAVIS over the overlay failed: $lavis_probe"
  else
    say "$lavis_probe"
    deadline=$((SECONDS + T_LAVIS))
    for f in "${LAVIS_FILES[@]}"; do
      run_tests LAVIS "$deadline" $((T_LAVIS - 10)) "$LAVIS_PATH" "$f"
    done
  fi
fi

# ---------------------------------------------------------------- benchmarks at real sizes
bench() {  # bench NAME CAP NOTE COMMAND...: one capped step; its failure is recorded and the rest go on
  local name=$1 cap=$2 note=$3 t0=$SECONDS rc status
  shift 3
  PYTHONPATH=$MAIN_PATH timeout -k 10 "$cap" "$@" 2>&1 | tee -a "$LOG"
  rc=${PIPESTATUS[0]}
  case $rc in
    0) status=ok ;;
    124 | 137) status="timed out after ${cap}s" ;;
    *) status="failed (exit $rc)" ;;
  esac
  step "$name" "$status" "$rc" $((SECONDS - t0)) "$note"
}
bench benchmark-retrieval_recall "$T_BENCH" "COCO-5K, 10K x 50K (peer) and COCO-train2017 sizes, fp32/fp16/bf16" \
  "$PY" benchmarks/retrieval_recall.py --device cuda --json "$OUTDIR/retrieval_recall.json"
bench benchmark-train_step "$T_TRAIN" "C5 step, BLIP-base shapes: text-only vs frozen ViT" \
  "$PY" benchmarks/train_step.py --device cuda --rounds 1 --steps 10 --json "$OUTDIR/train_step.json"
# shellcheck disable=SC2086  # EMBED_ARGS is a list of words
bench benchmark-mllm_embed "$T_EMBED" "EOL embedding: 1-by-1 / old chunks / length-sorted batches, bf16, small and base" \
  "$PY" benchmarks/mllm_embed.py $EMBED_ARGS --json "$OUTDIR/mllm_embed.json"
# shellcheck disable=SC2086  # SCALING_ARGS is a list of words
bench benchmark-scaling "$T_SCALING" "vlr precompute --device cuda vs its tower's forward, pre-decoded (ViT-B, 12 workers)" \
  "$PY" benchmarks/scaling.py $SCALING_ARGS --json "$OUTDIR/scaling.json"
# shellcheck disable=SC2086  # CAPTION_ARGS is a list of words
bench benchmark-caption_batch "$T_CAPTION" "vlr caption's generation: 1-by-1 / chunks / length-sorted batches, bf16, small and base" \
  "$PY" benchmarks/caption_batch.py $CAPTION_ARGS --json "$OUTDIR/caption_batch.json"

# ---------------------------------------------------------------- summary
summary
rc=$?
rm -rf "$STEPS" "$JUNIT"
if [ "$rc" = 0 ]; then
  say "PASSED in $(($(date +%s) - STARTED)) s: $OUTDIR/summary.md"
else
  say "FAILED in $(($(date +%s) - STARTED)) s: see Problems in $OUTDIR/summary.md"
fi
exit "$rc"
