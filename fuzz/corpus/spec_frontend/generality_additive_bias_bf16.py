# Full additive bias: a bf16 [B, H, Sq, Skv] tensor added to every score. This is SDPA's float
# `attn_mask` ported to FlexAttention (HF models hand over such 4-D biases; AlphaFold-style pair
# biases once materialised per batch and head). Rank-4 capture, one load per score.
import torch


def score_mod(score, b, h, q_idx, kv_idx, bias):
    return score + bias[b, h, q_idx, kv_idx]
