# A learned mixture of saturating distance kernels, atan, asinh and expm1 (the kernel families
# compared in KERPLE / Sandwich-style relative position ablations), bidirectional. The global
# float32 [3] mixture weights have an explicit shape (random:float32[3]): mix[0], mix[1], mix[-1].
import torch


def score_mod(score, b, h, q_idx, kv_idx, mix, tau: float = 64.0):
    d = (kv_idx - q_idx) / tau
    return (score + mix[0] * torch.atan(d) + mix[1] * torch.asinh(d)
            + mix[-1] * torch.expm1(-torch.abs(d)))
