# Right-padded batch, causal: sequence b holds lengths[b] real tokens, later keys are padding.
# The FlexAttention port of a HF `attention_mask` built from per-sequence lengths (attention-gym
# padding examples); lengths is an int32 [B] tensor, and a length of 0 leaves no key at all.
import torch


def mask_mod(b, h, q_idx, kv_idx, lengths):
    return (kv_idx < lengths[b]) & (q_idx >= kv_idx)
