#!/usr/bin/env bash
# Lowers every example variant with the CuBridge CLI (on this CPU machine: spec, transfer, CPU
# verification against the spec's oracle, lowering) and collects the kernels for
# bench/run_matrix.py:
#   bash bench/make_kernels.sh OUTDIR [CLI]      (CLI defaults to ./build/client/cubridge-cli)
# writes OUTDIR/NAME_sm_90.cu for the 12 variants of examples/specs/, with prefix_lm twice:
# prefix_lm_1k (prefix=256) for S=1024 and prefix_lm_8k (prefix=2048) for S=8192.
# The lowered launcher takes any batch / heads / seqlen / head dim (64, 128, 256) / dtype at run
# time; only the spec's params are baked in, so small shapes keep the CPU verification quick.
# Every other variant keeps its spec defaults (windows 256, 64 global tokens, block 128, cap 20,
# ALiBi heads=32). At most two CLI jobs run at once.
#
# On a GPU machine, CUBRIDGE_TUNE=1 runs the GPU stages too: every kernel is verified on the GPU,
# each tile candidate profiled at one benchmark shape (Qwen2.5-72B heads 64/8, S=8192, batch 2) and the
# fastest kept (autotuning for that shape class); NAME.report.json sits beside each kernel. One
# job at a time then, so profiles do not share the GPU. CUBRIDGE_TILES narrows the candidates.
#
# CUBRIDGE_SUITE=generality lowers the specs of examples/specs/generality/suite.json instead, each
# with its suite buffers and params (OUTDIR/NAME_sm_90.cu and NAME.report.json, whose
# lowering.buffers give run_matrix.py --suite the launcher's buffer slots).
#
# CUBRIDGE_TILE=128x176w12 pins the tile instead (`adapt --tile`): every kernel verified on the CPU
# and lowered at it; run_matrix.py --candidate then plays the autotuner between two such sets.
#
# CUBRIDGE_ARCH=sm_80 lowers onto the sm_80 expert instead (OUTDIR/NAME_sm_80.cu; run_matrix.py
# --arch sm_80 times them, on a Hopper GPU too).
set -euo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: bash bench/make_kernels.sh OUTDIR [CLI]" >&2
  exit 2
fi
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUTDIR="$1"
CLI="${2:-$ROOT/build/client/cubridge-cli}"
if [ ! -x "$CLI" ]; then
  echo "make_kernels: no CLI at $CLI (build it: cmake --build build -j2 --target cubridge-cli)" >&2
  exit 2
fi
mkdir -p "$OUTDIR"
OUTDIR="$(cd "$OUTDIR" && pwd)"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

# Lowering shape: only a CPU verification size; the kernel is shape-generic.
# GQA heads (8 query heads on 2 kv heads): the head mapping h // (heads_q // heads_kv) then
# serves every layout of the benchmark (MHA is a group of one); a kernel lowered for MHA maps h to h
# and its launch plan refuses GQA calls.
ARCH="${CUBRIDGE_ARCH:-sm_90}"
case "$ARCH" in sm_80|sm_90) ;; *) echo "make_kernels: CUBRIDGE_ARCH=$ARCH: sm_80 or sm_90" >&2; exit 2;; esac
SHAPE=(--arch "$ARCH" --seqlen 512 --heads-q 8 --heads-kv 2 --head-dim 128 --dtype bf16 --no-cache)
PARALLEL=2
if [ "${CUBRIDGE_TUNE:-0}" = 1 ]; then
  SHAPE=(--arch "$ARCH" --seqlen 8192 --batch 2 --heads-q 64 --heads-kv 8 --head-dim 128 --dtype bf16
         --no-cache --gpu require)
  [ -n "${CUBRIDGE_TILES:-}" ] && SHAPE+=(--tiles "$CUBRIDGE_TILES")
  PARALLEL=1
fi
if [ -n "${CUBRIDGE_TILE:-}" ]; then SHAPE+=(--tile "$CUBRIDGE_TILE"); fi

# lower SPEC_NAME OUT_NAME [extra CLI flags...]: TMP/OUT_NAME/{kernel.cu,...} -> OUTDIR/OUT_NAME_ARCH.cu
lower() {
  local spec="$1" out="$2"
  shift 2
  local dir="$TMP/$out"
  if "$CLI" adapt "$ROOT/examples/specs/$spec.py" --local --out "$dir" "${SHAPE[@]}" "$@" \
      >"$TMP/$out.log" 2>&1 && [ -s "$dir/kernel.cu" ]; then
    cp "$dir/kernel.cu" "$OUTDIR/${out}_${ARCH}.cu"
    cp "$dir/report.json" "$OUTDIR/${out}.report.json"
    echo "ok   $out  ($(grep -m1 '^\[verify' "$TMP/$out.log" | sed 's/^\[verify *\] *ok *//'))"
    grep '^\[gpu' "$TMP/$out.log" | sed 's/^/     /' || true
  else
    echo "FAIL $out: $CLI adapt examples/specs/$spec.py $* failed:"
    sed 's/^/    /' "$TMP/$out.log"
    return 1
  fi
}

JOBS=(
  "full full"
  "causal causal"
  "sliding_window sliding_window"
  "global_sliding_window global_sliding_window"
  "prefix_lm prefix_lm_1k --param prefix=256"
  "prefix_lm prefix_lm_8k --param prefix=2048"
  "block_causal block_causal"
  "causal_document causal_document"
  "share_question share_question"
  "relative_position relative_position"
  "alibi alibi"
  "softcap softcap"
  "alibi_window_softcap alibi_window_softcap"
)

if [ -n "${CUBRIDGE_SUITE:-}" ]; then
  SUITE_JSON="$ROOT/examples/specs/$CUBRIDGE_SUITE/suite.json"
  [ -f "$SUITE_JSON" ] || { echo "make_kernels: no $SUITE_JSON" >&2; exit 2; }
  mapfile -t JOBS < <(python3 - "$SUITE_JSON" "$CUBRIDGE_SUITE" <<'PY'
import json, sys
suite, folder = json.load(open(sys.argv[1])), sys.argv[2]
for s in suite["specs"]:
    name = s["file"][:-3]
    flags = [f"--buffer {k}={v}" for k, v in s["buffers"].items()]
    flags += [f"--param {k}={v}" for k, v in s["params"].items()]
    print(" ".join([f"{folder}/{name}", name] + flags))
PY
)
fi

fails=0
running=0
for job in "${JOBS[@]}"; do
  # shellcheck disable=SC2086  # word splitting of the job line is intended
  lower $job &
  running=$((running + 1))
  if [ "$running" -ge "$PARALLEL" ]; then
    wait -n || fails=$((fails + 1))
    running=$((running - 1))
  fi
done
while [ "$running" -gt 0 ]; do
  wait -n || fails=$((fails + 1))
  running=$((running - 1))
done

echo "$(( ${#JOBS[@]} - fails ))/${#JOBS[@]} kernels in $OUTDIR"
[ "$fails" -eq 0 ]
