# Block butterfly sparsity (Pixelfly, Chen et al. 2022; butterfly / Monarch sparse attention):
# query block i sees key block j when i XOR j is 0 or a power of two, i.e. x & (x - 1) == 0 with
# x = (q_idx >> shift) ^ (kv_idx >> shift). Integer bit ops on the indices; bidirectional.
import torch


def mask_mod(b, h, q_idx, kv_idx, shift: int = 6):
    x = (q_idx >> shift) ^ (kv_idx >> shift)
    return (x & (x - 1)) == 0
