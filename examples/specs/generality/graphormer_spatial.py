# Graph transformer over a batch of graphs: attention only along edges (bool [B, N, N] adjacency,
# plus self-loops, as in GT / Dwivedi & Bresson 2021) with Graphormer's spatial encoding, a learned
# float32 [H, 21] table indexed by the int32 [B, N, N] shortest-path hop count (Ying et al. 2021).
# Rank-3 captures of two dtypes, and a buffer value used as another buffer's index.
import torch


def mask_mod(b, h, q_idx, kv_idx, adj):
    return adj[b, q_idx, kv_idx] | (q_idx == kv_idx)


def score_mod(score, b, h, q_idx, kv_idx, dist, spatial, max_hops: int = 20):
    hops = torch.clamp(dist[b, q_idx, kv_idx], 0, max_hops).long()
    return score + spatial[h, hops]
