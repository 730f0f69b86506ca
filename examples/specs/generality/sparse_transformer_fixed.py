# Sparse Transformer "fixed" pattern (Child et al. 2019): causal, the query's own block plus the
# last `summary` positions of every block. Same block via q_idx | (block - 1) (the block's last
# position), summary columns via the complemented low bits ((~kv_idx) & (block - 1)) < summary.
import torch


def mask_mod(b, h, q_idx, kv_idx, block: int = 128, summary: int = 8):
    causal = q_idx >= kv_idx
    same_block = (q_idx | (block - 1)) == (kv_idx | (block - 1))
    # (~kv_idx) in parentheses: TorchScript parses `~a & b` as `~(a & b)`, unlike Python
    is_summary = ((~kv_idx) & (block - 1)) < summary
    return causal & (same_block | is_summary)
