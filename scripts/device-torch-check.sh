#!/usr/bin/env bash
# On a lent GPU machine (docs/torch.md, "Tests"): builds the PyTorch op, the CLI and a local
# cluster's daemons against the machine's LibTorch, then runs tests/python/gpu_check.py and the
# README's example, writing under $OUT (torch_gpu.json, torch_gpu.log, swap.txt).
#   bash scripts/device-torch-check.sh [CHECKS] [SPECS_REGEX]
# CHECKS: gpu_check's --only (default: all); SPECS_REGEX: its --specs. The generality suite's
# reports (for the specs check's tensor shapes) are made here first when .lowered/gen is absent.
set -euo pipefail
cd "$(dirname "$0")/.."
source .debs/activate.sh >/dev/null
out=${OUT:-/tmp}
bash scripts/device-build.sh build-dev cubridge-cli cubridge-cli-local cubridge_torch \
  cubridge-torch-overhead cubridge-coordinator cubridge-worker cubridge-gpu-runner
if [ ! -d .lowered/gen ]; then
  CUBRIDGE_SUITE=generality bash bench/make_kernels.sh .lowered/gen build-dev/client/cubridge-cli >/dev/null
fi
export PYTHONPATH=$PWD/build-dev/python CUBRIDGE_TORCH_CACHE=${CUBRIDGE_TORCH_CACHE:-/tmp/cubridge-torch}
args=(--out "$out/torch_gpu.json")
[ -n "${1:-}" ] && args+=(--only "$1")
[ -n "${2:-}" ] && args+=(--specs "$2")
rc=0
python3 tests/python/gpu_check.py "${args[@]}" 2>&1 | tee "$out/torch_gpu.log" |
  grep -E '^(numerics|specs|graph|block|process|backward|compile|overhead|service|t5_8k) ' || rc=1
python3 examples/torch/swap.py 2>&1 | grep -v Warning | tee "$out/swap.txt" || rc=1
exit $rc
