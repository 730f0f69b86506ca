# KERPLE logarithmic kernel (Chi et al. 2022): bias -r1 * log(1 + r2 |i - j|) with learned per-head
# r1, r2 (float32 [H] each), kept positive by clamping as the paper's implementation does; causal.
# A log1p distance kernel and two per-head loads.
import torch


def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def score_mod(score, b, h, q_idx, kv_idx, r1, r2):
    a = torch.clamp(r1[h], min=0.01)
    c = torch.clamp(r2[h], min=0.01)
    return score - a * torch.log1p(c * torch.abs(q_idx - kv_idx))
