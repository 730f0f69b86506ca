"""Relative position bias: adds a bias proportional to the query-key distance."""
import torch


def score_mod(score, b, h, q_idx, kv_idx, scale: float = 0.01):
    return score + (q_idx - kv_idx) * scale
