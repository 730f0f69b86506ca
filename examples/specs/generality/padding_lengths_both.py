# Padded encoder batch (BERT-style): queries and keys past lengths[b] are padding, so every
# query row at or after lengths[b] keeps no key at all (fully masked rows: O = 0, LSE = -inf).
# Users meet it porting HF encoders' 2-D attention_mask to FlexAttention; lengths: int32 [B].
import torch


def mask_mod(b, h, q_idx, kv_idx, lengths):
    valid_query = q_idx < lengths[b]
    valid_key = kv_idx < lengths[b]
    return valid_query & valid_key
