"""Causal sliding window plus global tokens: the first `global_tokens` keys are always visible."""
import torch


def mask_mod(b, h, q_idx, kv_idx, window: int = 256, global_tokens: int = 64):
    in_window = q_idx - kv_idx <= window
    is_global = kv_idx < global_tokens
    return (q_idx >= kv_idx) & (in_window | is_global)
