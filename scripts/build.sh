#!/usr/bin/env bash
# Configures and builds CuBridge into ${BUILD_DIR:-build} (Ninja, all cores). Arguments: -D...
# settings go to CMake's configure step, anything else names a target to build instead of all
# (e.g. `bash scripts/build.sh cubridge-cli -DCUBRIDGE_BUILD_TESTS=OFF`).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
settings=() targets=()
for arg in "$@"; do
  case "$arg" in
    -D*) settings+=("$arg") ;;
    *) targets+=(--target "$arg") ;;
  esac
done
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} "${settings[@]}" >/dev/null
cmake --build "$build" -j "$(nproc)" "${targets[@]}"
