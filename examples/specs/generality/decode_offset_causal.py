# Causal attention with a KV-cache offset held in a rank-0 int64 tensor: query i is token
# i + offset of the sequence. The FlexAttention docs / attention-gym decoding recipe captures the
# offset as a tensor so that each decode step reuses the compiled kernel.
import torch


def mask_mod(b, h, q_idx, kv_idx, offset):
    return q_idx + offset >= kv_idx
