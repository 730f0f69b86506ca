# Hash-like unstructured sparsity on a causal mask: a deterministic pseudo-random keep pattern,
# (q_idx * 31 + kv_idx * 17) % modulus != 0, a stored-mask-free stand-in for BigBird's random
# attention (Zaheer et al. 2020). Every visited block is partial, and query 0 (whose only key,
# 0, hashes to 0) keeps no key at all.
import torch


def mask_mod(b, h, q_idx, kv_idx, modulus: int = 7):
    return (((q_idx * 31 + kv_idx * 17) % modulus) != 0) & (q_idx >= kv_idx)
