#!/usr/bin/env bash
# On the lent GPU: build the standalone kernel check in a few variants, run each, keep SASS notes.
set -u
cd "$(dirname "$0")"
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
for v in "${@:-1}"; do
  nvcc -O3 -std=c++17 -DCUBRIDGE_QK_UNROLL=$v -gencode arch=compute_90,code=sm_90 -Xptxas -v -o fa2_u$v fa2_check.cu 2> $OUT/ptxas_u$v.txt || { cat $OUT/ptxas_u$v.txt; exit 1; }
  cuobjdump -sass fa2_u$v > $OUT/sass_u$v.txt 2>/dev/null
  echo "=== QK unroll $v"; ./fa2_u$v 2>&1 | tee $OUT/run_u$v.txt
done
echo "=== references (same GPU, same run)"; PYTHONUNBUFFERED=1 python3 compare.py 2>&1 | grep -v Warning | tee $OUT/ref.txt
