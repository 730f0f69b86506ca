# Shaw et al. (2018) clipped relative positions with a per-head clip distance: kv_idx - q_idx is
# clamped to [-kmax[h], kmax[h]] (int64 [H] tensor bounds), then to the table's range, and indexes
# a learned float32 [H, 2 * max_clip + 1] bias table (relative-position bias, FlexAttention docs).
import torch


def score_mod(score, b, h, q_idx, kv_idx, kmax, table, max_clip: int = 32):
    rel = torch.clamp(kv_idx - q_idx, min=-kmax[h], max=kmax[h])
    rel = torch.clamp(rel, -max_clip, max_clip)
    return score + table[h, rel + max_clip]
