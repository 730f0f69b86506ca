# Longformer-style per-head dilation (Beltagy et al. 2020): causal windows of `window` attended
# positions whose dilation grows with the head, 1 + h % max_dilation (1 to 4), so the window spans
# 32 to 128 tokens. Modulo by a per-head tensor divisor; short windows, few KV blocks per tile.
import torch


def mask_mod(b, h, q_idx, kv_idx, window: int = 32, max_dilation: int = 4):
    dilation = h % max_dilation + 1
    d = q_idx - kv_idx
    return (d >= 0) & (d < window * dilation) & (d % dilation == 0)
