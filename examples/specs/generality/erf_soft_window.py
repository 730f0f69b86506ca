# Soft sliding window on a causal mask: a Gaussian-edged window weight 0.5 * erfc((d - window) /
# (sigma sqrt 2)) added in log space, plus a saturating long-range penalty alpha * erf(d / horizon):
# smooth alternatives to a hard window, as users write them as FlexAttention score_mods.
import torch


def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def score_mod(score, b, h, q_idx, kv_idx, window: int = 256, sigma: float = 32.0,
              alpha: float = 1.0, horizon: float = 2048.0):
    d = q_idx - kv_idx
    # clamped so the log stays finite: erfc(8) ~ 1e-29 is still a normal fp32 number
    z = torch.clamp((d - window) / (sigma * 1.4142135623730951), max=8.0)
    return score + torch.log(0.5 * torch.erfc(z)) - alpha * torch.erf(d / horizon)
