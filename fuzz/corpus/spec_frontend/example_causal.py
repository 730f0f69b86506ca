"""Causal attention: each query sees itself and the keys before it."""
import torch


def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx
