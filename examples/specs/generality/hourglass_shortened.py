# Hourglass / Funnel-style shortened queries (Nawrot et al. 2022): shortened query i stands for the
# 2^shift full-rate keys [i << shift, (i + 1) << shift) and attends causally, keys before
# (q_idx + 1) << shift, within a local window of `blocks` shortened steps (kv_idx >> shift).
import torch


def mask_mod(b, h, q_idx, kv_idx, shift: int = 1, blocks: int = 64):
    causal = kv_idx < ((q_idx + 1) << shift)
    local = q_idx - (kv_idx >> shift) < blocks
    return causal & local
