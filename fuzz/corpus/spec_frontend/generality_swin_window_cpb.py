# Swin Transformer V2 window attention (Liu et al. 2022): attention stays inside windows of
# window x window patches, and the log-spaced continuous position bias sign(d) log2(|d| + 1) / 3
# of both axes goes through 16 * sigmoid of a per-head linear map (the paper's CPB MLP cut to one
# layer), weights float32 [2, H].
import torch


def log_coord(d, window: int):
    t = d * (8.0 / (window - 1))
    return torch.sign(t) * torch.log2(torch.abs(t) + 1.0) / 3.0


def mask_mod(b, h, q_idx, kv_idx, window: int = 16):
    area = window * window
    return q_idx // area == kv_idx // area


def score_mod(score, b, h, q_idx, kv_idx, w, window: int = 16):
    area = window * window
    pq = q_idx % area
    pk = kv_idx % area
    dy = log_coord(pq // window - pk // window, window)
    dx = log_coord(pq % window - pk % window, window)
    return score + 16 * torch.sigmoid(w[0, h] * dy + w[1, h] * dx)
