# Variants as users write them for flex_attention, for test_cubridge.py: closures over tensors
# and scalars, globals, helpers, lambdas, attribute captures. Kept in their own file so that the
# tests can name the lines CuBridge's errors must point at.
import torch

SLOPES = torch.linspace(-1.0, -0.1, 4)


def causal(b, h, q, kv):
    return q >= kv


def learned_alibi(score, b, h, q, kv):
    return score + SLOPES[h] * (kv - q)


def sliding(window):
    def mask(b, h, q_idx, kv_idx):
        return (q_idx - kv_idx).abs() <= window
    return mask


def bucket(rel, n: int):
    return torch.clamp(rel, -n, n) + n


def make_table_bias(table):
    def score_mod(score, b, h, q_idx, kv_idx):
        return score + table[h, bucket(kv_idx - q_idx, 3)]
    return score_mod


class Model:
    def __init__(self):
        self.bias = torch.randn(4)

    def score_mod(self):
        def fn(score, b, h, q_idx, kv_idx):
            return score * 0.5 + self.bias[h]
        return fn


lengths = torch.tensor([5, 9], dtype=torch.int32)
padding = lambda b, h, q_idx, kv_idx: kv_idx < lengths[b]  # noqa: E731


def captures_a_list():
    ids = [1, 2, 3]

    def mask(b, h, q_idx, kv_idx):
        return q_idx >= ids[0]
    return mask


def not_elementwise(score, b, h, q_idx, kv_idx):
    return score + torch.arange(4)


def bind_score(fn, x0):
    # A spec file's score_mod with its captured tensor bound, as a FlexAttention user would.
    def score_mod(score, b, h, q_idx, kv_idx):
        return fn(score, b, h, q_idx, kv_idx, x0)
    return score_mod


def bind_mask(fn, x0):
    # A spec file's mask_mod with its captured tensor bound.
    def mask_mod(b, h, q_idx, kv_idx):
        return fn(b, h, q_idx, kv_idx, x0)
    return mask_mod
