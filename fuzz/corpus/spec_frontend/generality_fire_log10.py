# FIRE (Li et al. 2024, functional interpolation for relative positions): psi(x) = log(c x + 1),
# bias f(psi(i - j) / psi(max(i, L))) with progressive interpolation; f, an MLP in the paper, is a
# per-head affine map from a float32 [2, H] tensor. Written with log10 (the base cancels); causal.
import torch


def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def score_mod(score, b, h, q_idx, kv_idx, w, c: float = 1.0, threshold: int = 512):
    rel = torch.log10(c * torch.abs(q_idx - kv_idx) + 1)
    norm = torch.log10(c * torch.clamp(q_idx, min=threshold) + 1)
    return score + w[0, h] * (rel / norm) + w[1, h]
