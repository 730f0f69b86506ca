# Per-head logit clipping with tensor bounds, torch.clamp(score, min=lo[h], max=hi[h]) (clipped
# softmax for quantisation-friendly attention, Bondarenko et al. 2023), then a piecewise distance
# penalty written as nested torch.where. lo, hi: float32 [H]; a head with lo > hi gives hi.
import torch


def score_mod(score, b, h, q_idx, kv_idx, lo, hi, near: int = 64, far: int = 512,
              penalty: float = 2.0):
    clipped = torch.clamp(score, min=lo[h], max=hi[h])
    dist = torch.abs(q_idx - kv_idx)
    return torch.where(dist < near, clipped,
                       torch.where(dist < far, clipped - 0.5 * penalty,
                                   torch.where(q_idx >= kv_idx, clipped - penalty,
                                               clipped - 2.0 * penalty)))
