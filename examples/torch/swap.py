"""The README's two-line swap, whole: a document mask and learned per-head ALiBi slopes, called
through flex_attention and through cubridge.attention, on a GPU.

    PYTHONPATH=build/python python3 examples/torch/swap.py

Prints the largest difference between the two outputs and each one's time per call.
"""
import sys
import time

import torch

if not torch.cuda.is_available():
    sys.exit("swap.py: needs a CUDA GPU (and PyTorch with CUDA); nothing to run here")

from torch.nn.attention.flex_attention import create_block_mask, flex_attention  # noqa: E402

from cubridge import attention  # noqa: E402

B, HQ, HKV, S, D = 2, 32, 8, 4096, 128
torch.manual_seed(0)
q = torch.randn(B, HQ, S, D, device="cuda", dtype=torch.bfloat16)
k = torch.randn(B, HKV, S, D, device="cuda", dtype=torch.bfloat16)
v = torch.randn(B, HKV, S, D, device="cuda", dtype=torch.bfloat16)
doc = (torch.arange(S, device="cuda") // 1000).to(torch.int32)  # four packed documents
slopes = -torch.logspace(-3, 0, HQ, base=2, device="cuda")      # learned per-head ALiBi slopes


def mask_mod(b, h, q_idx, kv_idx):
    return (doc[q_idx] == doc[kv_idx]) & (q_idx >= kv_idx)


def score_mod(score, b, h, q_idx, kv_idx):
    return score + slopes[h] * (kv_idx - q_idx)


def per_call_ms(fn, reps=20):
    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) * 1e3 / reps


flex = torch.compile(flex_attention)
block_mask = create_block_mask(mask_mod, None, None, S, S, device="cuda")
want = flex(q, k, v, score_mod=score_mod, block_mask=block_mask, enable_gqa=True)

t = time.perf_counter()
out = attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod, enable_gqa=True)  # the swap
torch.cuda.synchronize()
print(f"first cubridge.attention call (adapts the variant, or loads it): {time.perf_counter() - t:.2f} s")
print(f"max |cubridge - flex|: {(out.float() - want.float()).abs().max().item():.2e}")
print(f"flex_attention (torch.compile): {per_call_ms(lambda: flex(q, k, v, score_mod=score_mod, block_mask=block_mask, enable_gqa=True)):.3f} ms per call")
print(f"cubridge.attention:             {per_call_ms(lambda: attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod, enable_gqa=True)):.3f} ms per call")
