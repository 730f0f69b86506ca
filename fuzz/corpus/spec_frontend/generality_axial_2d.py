# Causal axial attention on a flattened image (Axial Transformer, Ho et al. 2019; attention-gym's
# 2-D masks): a query sees the earlier pixels of its row (q_idx % width >= kv_idx % width) and the
# pixels above it in its column (q_idx % width == kv_idx % width), `width` pixels a row.
import torch


def mask_mod(b, h, q_idx, kv_idx, width: int = 96):
    same_row = q_idx // width == kv_idx // width
    row_causal = same_row & (q_idx % width >= kv_idx % width)
    column = (q_idx % width == kv_idx % width) & (q_idx >= kv_idx)
    return row_causal | column
