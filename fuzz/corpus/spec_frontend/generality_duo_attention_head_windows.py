# Per-head sliding windows (DuoAttention, Xiao et al. 2024; MoA): every query head has its own
# window from an int64 [H] tensor (large for "retrieval" heads, small for "streaming" heads) and
# keeps the first `sink` tokens. Per-head int load changes the block sparsity head by head.
import torch


def mask_mod(b, h, q_idx, kv_idx, window, sink: int = 4):
    causal = q_idx >= kv_idx
    return causal & ((q_idx - kv_idx <= window[h]) | (kv_idx < sink))
