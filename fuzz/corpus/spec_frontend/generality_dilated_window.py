# Dilated sliding window (Longformer's dilated heads, Beltagy et al. 2020; LongNet-style dilation):
# bidirectional, keys within `window` tokens whose distance is a multiple of `dilation`. Python `%`
# of the signed distance (negative for keys after the query); a short window, so each query tile
# visits only a few KV blocks, all of them partial.
import torch


def mask_mod(b, h, q_idx, kv_idx, window: int = 96, dilation: int = 3):
    d = q_idx - kv_idx
    return (torch.abs(d) <= window) & (d % dilation == 0)
