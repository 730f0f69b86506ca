# Sparse Transformer "strided" pattern (Child et al. 2019): causal, a local window of `stride`
# keys plus every key in the query's column, i.e. the same low bits: ((q_idx ^ kv_idx) &
# (stride - 1)) == 0, which for a power-of-two stride is (q_idx - kv_idx) % stride == 0.
import torch


def mask_mod(b, h, q_idx, kv_idx, stride: int = 128):
    causal = q_idx >= kv_idx
    local = q_idx - kv_idx < stride
    same_column = ((q_idx ^ kv_idx) & (stride - 1)) == 0
    return causal & (local | same_column)
