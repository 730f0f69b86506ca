#!/usr/bin/env bash
# On the device machine (repository root), after prepare.sh here: for each prepared tree, builds
# its GPU targets, runs its `ctest -L gpu` (the tree's own experts and worker: the persistent
# scheduler's loader bound only exists there), then times the focus variants of every kernel set
# (HEAD's .lowered/bench and each .lowered/pending_NAME) against Flex / SDPA in this one run.
# Writes $OUT/NAME.gpu.txt and $OUT/matrix_NAME/ (matrix_rows.json, benchmarks_section.md).
#   ONLY=REGEX (variants, default below)  HEADS=... (default llama2-7b,qwen2.5-72b)
set -uo pipefail
cd "$(dirname "$0")/../../.."
: "${OUT:=/tmp/pending-out}"
mkdir -p "$OUT"
ONLY="${ONLY:-^(full|causal|alibi|relative_position|sliding_window|causal_document|share_question)$}"
HEADS="${HEADS:-llama2-7b,qwen2.5-72b}"
source .debs/activate.sh >/dev/null
for dir in .pending/*/; do
  name="$(basename "$dir")"
  ln -sfn "$PWD/.debs" "$dir/.debs"
  mkdir -p "$OUT/$name.build"
  if (cd "$dir" && OUT="$OUT/$name.build" bash scripts/device-build.sh build-dev cubridge-cli \
        cubridge-gpu-runner gpu_tests); then
    (cd "$dir/build-dev" && ctest -L gpu --output-on-failure > "$OUT/$name.gpu.txt" 2>&1)
    echo "$name: $(grep -E 'tests passed|tests failed' "$OUT/$name.gpu.txt")"
  else
    echo "$name: build failed (see $OUT/$name.build)"
  fi
done
for kernels in .lowered/bench .lowered/pending_*; do
  [ -d "$kernels" ] || continue
  set_name="$(basename "$kernels")"
  OUT="$OUT/matrix_$set_name" python3 bench/run_matrix.py "$kernels" --only "$ONLY" \
    --heads "$HEADS" --extra-hdims "" > "$OUT/matrix_$set_name.log" 2>&1
  echo "$set_name: $(tail -1 "$OUT/matrix_$set_name.log")"
done
