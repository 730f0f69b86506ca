"""Causal sliding window: each query sees the `window` keys before it and itself."""
import torch


def mask_mod(b, h, q_idx, kv_idx, window: int = 256):
    return (q_idx >= kv_idx) & (q_idx - kv_idx <= window)
