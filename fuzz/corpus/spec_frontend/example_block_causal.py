"""Block-causal: tokens attend to every token of their own block and of earlier blocks."""
import torch


def mask_mod(b, h, q_idx, kv_idx, block: int = 128):
    return (q_idx // block) >= (kv_idx // block)
