# Hyperbolic distance bias (hyperbolic attention, Gulcehre et al. 2019): token i sits at depth
# t = c * log1p(i / horizon) on a geodesic of the hyperboloid, points (cosh t, sinh t), and each
# head penalises the Lorentz distance acosh(cosh t cosh s - sinh t sinh s) with a bf16 [H] weight.
import torch


def depth(idx, c: float, horizon: int):
    return c * torch.log1p(idx / horizon)


def score_mod(score, b, h, q_idx, kv_idx, w, c: float = 0.4, horizon: int = 64):
    tq = depth(q_idx, c, horizon)
    tk = depth(kv_idx, c, horizon)
    inner = torch.cosh(tq) * torch.cosh(tk) - torch.sinh(tq) * torch.sinh(tk)
    # mathematically >= 1; the clamp keeps rounding from taking acosh out of its domain
    dist = torch.acosh(torch.clamp(inner, min=1.0))
    return score - w[h] * dist
