"""Tanh soft-capping of the scores (Gemma 2, Grok): cap * tanh(score / cap)."""
import torch


def score_mod(score, b, h, q_idx, kv_idx, cap: float = 20.0):
    return cap * torch.tanh(score / cap)
