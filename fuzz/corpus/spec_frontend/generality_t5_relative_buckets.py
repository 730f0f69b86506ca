# T5 relative position bias: a learned float32 [H, 32] table indexed by T5's bidirectional
# log-bucketed distance (Raffel et al. 2020; HF T5Attention._relative_position_bucket), i.e.
# the FlexAttention docs' relative-position example with a real lookup table.
import math
import torch


def t5_bucket(rel, num_buckets: int, max_distance: int):
    # rel = kv_idx - q_idx: half the buckets for keys after the query, half for keys before it
    half = num_buckets // 2
    side = (rel > 0).long() * half
    n = torch.abs(rel)
    max_exact = half // 2
    # log-spaced buckets from max_exact to max_distance; the 1e-3 keeps the exact bucket edges
    # (n = 16, 32, 64) clear of rounding, so the fp64 oracle and an fp32 kernel agree on them
    n_large = torch.clamp(n, min=max_exact)
    log_ratio = torch.log(n_large / max_exact) / math.log(max_distance / max_exact)
    large = max_exact + (log_ratio * (half - max_exact) + 1e-3).long()
    large = torch.clamp(large, max=half - 1)
    bucket = side + torch.where(n < max_exact, n, large)
    # clamped so that the table index provably stays in [0, num_buckets - 1]
    return torch.clamp(bucket, 0, num_buckets - 1)


def score_mod(score, b, h, q_idx, kv_idx, table, num_buckets: int = 32, max_distance: int = 128):
    return score + table[h, t5_bucket(kv_idx - q_idx, num_buckets, max_distance)]
