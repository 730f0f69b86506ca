# Symmetric linear distance buckets: torch.trunc((kv_idx - q_idx) / width) rounds toward zero, so
# the bucket around the query spans -(width - 1)..width - 1 (floor would shift the keys before it
# by one), clamped to +-max_bucket and looked up in a learned float32 [H, 2 * max_bucket + 1]
# table (bucketed relative position bias as in DeBERTa / T5, with linear buckets).
import torch


def score_mod(score, b, h, q_idx, kv_idx, table, width: int = 32, max_bucket: int = 16):
    bucket = torch.trunc((kv_idx - q_idx) / width).long()
    bucket = torch.clamp(bucket, -max_bucket, max_bucket)
    return score + table[h, bucket + max_bucket]
