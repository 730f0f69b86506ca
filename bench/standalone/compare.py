#!/usr/bin/env python3
"""Times FlexAttention (torch.compile'd) and SDPA (each backend, fastest kept) on the shapes the
standalone check times, so that its figures have their references from the same run and GPU."""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.flex_attention import create_block_mask, flex_attention
from triton.testing import do_bench

flex = torch.compile(flex_attention, dynamic=False)


def causal(b, h, q, kv):
    return q >= kv


def tflops(ms, b, h, s, d, is_causal):
    kept = s * (s + 1) / 2 if is_causal else s * s
    return 4 * b * h * kept * d / (ms * 1e-3) / 1e12


def sdpa_best(q, k, v, is_causal):
    best = None
    for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION,
                    SDPBackend.EFFICIENT_ATTENTION):
        try:
            with sdpa_kernel([backend]):
                ms = do_bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=is_causal),
                              warmup=25, rep=200, return_mode="median")
        except RuntimeError:
            continue
        if best is None or ms < best[0]:
            best = (ms, backend.name)
    return best


def main():
    print(torch.cuda.get_device_name(), torch.__version__)
    for d, s, is_causal in [(128, 8192, False), (128, 8192, True), (128, 1024, False),
                            (64, 8192, True), (256, 8192, True)]:
        b, h = max(1, 16384 // s), 32
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        mask = create_block_mask(causal, None, None, s, s) if is_causal else None
        flex(q, k, v, block_mask=mask)
        f_ms = do_bench(lambda: flex(q, k, v, block_mask=mask), warmup=25, rep=200,
                        return_mode="median")
        sd = sdpa_best(q, k, v, is_causal)
        name = "causal" if is_causal else "full"
        print(f"ref D={d} {name} S={s} B={b} Hq={h}: flex {tflops(f_ms, b, h, s, d, is_causal):.1f} "
              f"TFLOP/s; sdpa {tflops(sd[0], b, h, s, d, is_causal):.1f} TFLOP/s ({sd[1]})")


if __name__ == "__main__":
    main()
