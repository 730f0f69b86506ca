# 2-D polar relative position bias for image patches flattened row-major (`width` patches a row):
# distance and angle (torch.atan2) between patches, weighted per head by a float32 [3, H] tensor.
# Users meet it in vision transformers' image RPE (iRPE, Wu et al. 2021) ported to FlexAttention.
import torch


def score_mod(score, b, h, q_idx, kv_idx, w, width: int = 32):
    dy = (q_idx // width - kv_idx // width).float()
    dx = (q_idx % width - kv_idx % width).float()
    radius = torch.sqrt(dx * dx + dy * dy)
    angle = torch.atan2(dy, dx)
    return (score - torch.abs(w[0, h]) * radius + w[1, h] * torch.sin(angle)
            + w[2, h] * torch.cos(2.0 * angle))
