# Arbitrary dense keep-mask: a bool [Sq, Skv] tensor indexed keep[q_idx, kv_idx], and causal.
# FlexAttention users meet it when a data pipeline hands over a materialised mask (create_mask /
# SDPA bool attn_mask ports); random keep bits make every visited block partial, and row 0 keeps
# no key at all when keep[0, 0] is false.
import torch


def mask_mod(b, h, q_idx, kv_idx, keep):
    return keep[q_idx, kv_idx] & (q_idx >= kv_idx)
