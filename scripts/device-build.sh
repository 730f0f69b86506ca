#!/usr/bin/env bash
# On a lent GPU machine (see docs/benchmarks.md): builds the GPU-facing targets against the
# machine's CUDA LibTorch and the Debian libraries carried in .debs/. Re-running only rebuilds.
#   bash scripts/device-build.sh [BUILD_DIR] [TARGETS...]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-dev}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(cubridge-cli cubridge-gpu-runner gpu_tests worker_tests)
source .debs/activate.sh >/dev/null
log=${OUT:-/tmp}/device-build.log
if [ ! -f "$dir/build.ninja" ]; then
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCUBRIDGE_INSTALL_SDK=OFF $CUBRIDGE_DEVICE_CMAKE_ARGS >"$log" 2>&1 ||
    { tail -40 "$log"; exit 1; }
fi
ninja -C "$dir" -j"$(nproc)" "${targets[@]}" >>"$log" 2>&1 || { grep -E "error" -A5 "$log" | head -60; exit 1; }
echo "built ${targets[*]} in $dir"
