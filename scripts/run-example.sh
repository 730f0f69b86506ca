#!/usr/bin/env bash
# Quickstart, main job: installs the dependencies, builds, and adapts the expert kernel to the
# sliding-window + ALiBi + softcap example for a Qwen2.5-72B-like head layout (GQA 64/8).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
./build/client/cubridge-cli adapt examples/specs/alibi_window_softcap.py --local \
  --heads-q 64 --heads-kv 8 --head-dim 128 --seqlen 4096 --arch sm_80 --out out/alibi_window_softcap "$@"
