# CLIP-style learned temperature: a rank-0 float16 log-scale (a model parameter captured by the
# score_mod), exponentiated and clamped at 100 as in CLIP (Radford et al. 2021) and its
# open_clip port. A rank-0 tensor used as a value directly, no index.
import torch


def score_mod(score, b, h, q_idx, kv_idx, log_scale):
    return score * torch.clamp(torch.exp(log_scale.float()), max=100.0)
