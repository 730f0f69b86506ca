"""ALiBi: a linear distance penalty with a per-head slope 2^(-8 (h + 1) / heads)."""
import torch


def score_mod(score, b, h, q_idx, kv_idx, heads: int = 32):
    slope = torch.exp2(-8 * (h + 1) / heads)
    return score + (kv_idx - q_idx) * slope
