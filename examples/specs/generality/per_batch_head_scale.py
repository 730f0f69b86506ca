# Per-(sequence, head) temperature: a float16 [B, H] tensor multiplies the scores, e.g. serving
# with a temperature chosen per request and head, or a length-dependent (log-n) scale computed
# per packed sequence. Rank-2 half-precision capture indexed by b and the query head h.
import torch


def score_mod(score, b, h, q_idx, kv_idx, scale):
    return score * scale[b, h]
