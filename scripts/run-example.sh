#!/usr/bin/env bash
# Quickstart, main job: installs the dependencies, builds, and adapts the expert kernel to the
# sliding-window + ALiBi + softcap example for a Qwen2.5-72B-like head layout (GQA 64/8).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
# Only what this job runs (the CLI, its LibTorch half, and the GPU runner it starts where there is
# a GPU), not the tests and the service: a fraction of the whole build on a fresh machine.
bash scripts/build.sh cubridge-cli cubridge-cli-local cubridge-gpu-runner
./build/client/cubridge-cli adapt examples/specs/alibi_window_softcap.py --local \
  --heads-q 64 --heads-kv 8 --head-dim 128 --seqlen 4096 --arch sm_80 --out out/alibi_window_softcap "$@"
