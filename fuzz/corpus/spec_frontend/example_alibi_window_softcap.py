"""ALiBi bias and tanh soft-capping on a causal sliding window: a mask and a score_mod together."""
import torch


def mask_mod(b, h, q_idx, kv_idx, window: int = 256):
    return (q_idx >= kv_idx) & (q_idx - kv_idx <= window)


def alibi_bias(h, q_idx, kv_idx, heads: int):
    return (kv_idx - q_idx) * torch.exp2(-8 * (h + 1) / heads)


def score_mod(score, b, h, q_idx, kv_idx, heads: int = 32, cap: float = 20.0):
    biased = score + alibi_bias(h, q_idx, kv_idx, heads)
    return cap * torch.tanh(biased / cap)
