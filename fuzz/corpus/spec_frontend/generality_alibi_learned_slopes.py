# ALiBi with learned per-head slopes: a captured float32 [H] tensor instead of 2^(-8(h+1)/H),
# on a causal mask. Users meet it in the ALiBi paper's trainable-slope ablation (Press et al.
# 2022) and in attention-gym's alibi example when the slopes come from a model parameter.
import torch


def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def score_mod(score, b, h, q_idx, kv_idx, slopes):
    # h is the query head: with GQA each query head keeps its own slope
    return score + slopes[h] * (kv_idx - q_idx)
