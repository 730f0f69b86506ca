"""Prefix-LM: bidirectional attention over the first `prefix` tokens, causal after them."""
import torch


def mask_mod(b, h, q_idx, kv_idx, prefix: int = 1024):
    return (kv_idx < prefix) | (q_idx >= kv_idx)
