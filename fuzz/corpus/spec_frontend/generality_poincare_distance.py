# Poincare-ball distance bias (hyperbolic neural networks, Ganea et al. 2018): token i sits at
# u = tanh(t / 2), t = c * log1p(i / horizon), on a diameter of the Poincare disk, and each head
# penalises 2 atanh(|u - v| / (1 - u v)) with a float16 [H] weight.
import torch


def disk_coord(idx, c: float, horizon: int):
    return torch.tanh(c * torch.log1p(idx / horizon) / 2)


def score_mod(score, b, h, q_idx, kv_idx, w, c: float = 0.4, horizon: int = 64):
    u = disk_coord(q_idx, c, horizon)
    v = disk_coord(kv_idx, c, horizon)
    ratio = torch.clamp(torch.abs(u - v) / (1 - u * v), max=0.999)
    return score - w[h] * (2 * torch.atanh(ratio))
