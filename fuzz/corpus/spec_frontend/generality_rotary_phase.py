# Rotary-like relative phase on a causal mask: the score is modulated by cos of the query-key
# distance times a per-head frequency, plus a sin term (a one-frequency stand-in for RoPE, Su et
# al. 2021, as users write it when porting position schemes to a FlexAttention score_mod).
import torch


def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def score_mod(score, b, h, q_idx, kv_idx, theta: float = 0.02, beta: float = 0.5):
    phase = (q_idx - kv_idx) * (theta / (h + 1))
    return score * torch.cos(phase) + beta * torch.sin(phase)
