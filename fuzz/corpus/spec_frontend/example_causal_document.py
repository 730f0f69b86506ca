"""Causal document masking (packed sequences): causal, and only within the same document.

`doc` holds one document id per token, nondecreasing along the sequence.
"""
import torch
from torch import Tensor


def mask_mod(b, h, q_idx, kv_idx, doc: Tensor):
    same_doc = doc[q_idx] == doc[kv_idx]
    return (q_idx >= kv_idx) & same_doc
