# Prompt-only prefill of a prefix-LM (T5 / UL2 style; attention-gym prefix_lm): the prompt's
# queries attend the whole prompt bidirectionally, and the query slots at or after `prefix` are
# padding that keep no key at all (fully masked rows: O = 0, LSE = -inf).
import torch


def mask_mod(b, h, q_idx, kv_idx, prefix: int = 300):
    return (q_idx < prefix) & (kv_idx < prefix)
