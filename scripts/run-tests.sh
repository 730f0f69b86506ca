#!/usr/bin/env bash
# Quickstart, tests: installs the dependencies, builds, and runs the whole CPU test suite with
# ctest. GPU tests (label `gpu`) report themselves skipped on a machine without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
cd build
ctest --output-on-failure -j "$(nproc)" --timeout 900
