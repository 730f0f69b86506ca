#!/usr/bin/env bash
# On the device machine (repository root), after prepare.sh here. In one call:
#  - builds the GPU targets of the trees named in $BUILD (default: the last one, every patch
#    applied) at low priority in the background, then runs their `ctest -L gpu` (each tree's own
#    experts and worker: the persistent scheduler's loader bound only exists there);
#  - meanwhile times the focus variants of every kernel set (HEAD's .lowered/bench and each
#    .lowered/pending_NAME) against Flex / SDPA, one set after the other;
#  - with time left, ncu profiles of the last set's full and ALiBi kernels (profile.sh).
# Writes $OUT/NAME.gpu.txt, $OUT/matrix_SET/ (matrix_rows.json, benchmarks_section.md), ncu_*.txt.
#   ONLY=REGEX (variants)  HEADS=...  BUILD="name ..."  MATRIX_BUDGET_S (per set, default 120)
#   PROFILE="full alibi" (the variants to profile; empty: none)
set -uo pipefail
cd "$(dirname "$0")/../../.."
: "${OUT:=/tmp/pending-out}"
mkdir -p "$OUT"
start=$SECONDS
ONLY="${ONLY:-^(full|causal|alibi|relative_position|sliding_window|causal_document|share_question)$}"
HEADS="${HEADS:-llama2-7b,qwen2.5-72b}"
BUILD="${BUILD:-$(ls -d .pending/*/ | tail -1 | xargs basename)}"
source .debs/activate.sh >/dev/null
build_tree() {
  local name=$1 dir=.pending/$1
  ln -sfn "$PWD/.debs" "$dir/.debs"
  mkdir -p "$OUT/$name.build"
  (cd "$dir" && OUT="$OUT/$name.build" nice -n 19 bash scripts/device-build.sh build-dev \
      cubridge-cli cubridge-gpu-runner gpu_tests) > "$OUT/$name.build/status.txt" 2>&1
}
pids=()
for name in $BUILD; do build_tree "$name" & pids+=($!); done
for kernels in .lowered/bench .lowered/pending_*; do
  [ -d "$kernels" ] || continue
  set_name="$(basename "$kernels")"
  OUT="$OUT/matrix_$set_name" python3 bench/run_matrix.py "$kernels" --only "$ONLY" \
    --heads "$HEADS" --extra-hdims "" --budget-s "${MATRIX_BUDGET_S:-120}" \
    > "$OUT/matrix_$set_name.log" 2>&1
  echo "[$((SECONDS - start))s] $set_name: $(tail -1 "$OUT/matrix_$set_name.log")"
done
wait "${pids[@]}"
for name in $BUILD; do
  if grep -q "^built" "$OUT/$name.build/status.txt"; then
    (cd ".pending/$name/build-dev" && timeout 200 ctest -L gpu --output-on-failure \
        > "$OUT/$name.gpu.txt" 2>&1)
    echo "[$((SECONDS - start))s] $name: $(grep -E 'tests passed|tests failed' "$OUT/$name.gpu.txt")"
  else
    echo "$name: build failed"; tail -30 "$OUT/$name.build/status.txt"
  fi
done
last="$(ls -d .lowered/pending_* | tail -1)"
for v in ${PROFILE-full alibi}; do
  [ $((SECONDS - start)) -lt 470 ] || break
  mkdir -p "/tmp/prof_$v" && cp "$last/${v}_sm_90.cu" "/tmp/prof_$v/kernel.cu"
  bash bench/sm90/profile.sh "$(basename "$last")_$v" "/tmp/prof_$v"
done
echo "[$((SECONDS - start))s] done"
