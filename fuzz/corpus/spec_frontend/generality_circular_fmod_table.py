# Circular relative positions for periodic sequences (circular genomes / plasmids, rotation-periodic
# signals): the bias depends on the signed distance modulo `period`, taken with torch.fmod (sign of
# the dividend, so it can be negative) and used directly as an index: Python's negative indexing
# wraps it into the float32 [H, period] table exactly as (kv_idx - q_idx) % period would.
import torch


def score_mod(score, b, h, q_idx, kv_idx, table, period: int = 48):
    return score + table[h, torch.fmod(kv_idx - q_idx, period)]
