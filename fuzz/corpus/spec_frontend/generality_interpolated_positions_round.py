# Position interpolation onto a coarser integer grid (PI, Chen et al. 2023; Self-Extend's grouped
# positions): positions are scaled by `ratio` and rounded with torch.round (ties to even: 0.5 -> 0,
# 1.5 -> 2, as in torch), and their difference indexes a learned float32 [H, 2 * max_rel + 1]
# table; causal.
import torch


def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def score_mod(score, b, h, q_idx, kv_idx, table, ratio: float = 0.25, max_rel: int = 64):
    rel = (torch.round(kv_idx * ratio) - torch.round(q_idx * ratio)).long()
    rel = torch.clamp(rel, -max_rel, max_rel)
    return score + table[h, rel + max_rel]
