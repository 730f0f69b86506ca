import torch


def mask_mod(b, h, q_idx, kv_idx):
    ok = ((~kv_idx) & 7) == (q_idx & 7)
    return ~ ( (kv_idx & 7) == 0 ) | ok
