#!/usr/bin/env python3
"""FlexAttention and SDPA at the shapes bench/standalone_sm90/fa3_check.cu times, in the same
device call, so the Hopper expert's numbers stand beside them in docs/benchmarks.md.

    python3 bench/standalone_sm90/baselines.py [OUT.json]

bf16, batch 2, 8192 tokens; full and causal (top-left). Median of triton's do_bench. TFLOP/s
count kept elements only (causal: S(S+1)/2 pairs), as the harness does. SDPA: cuDNN, flash and
efficient each tried alone, fastest kept. Flex: torch.compile(flex_attention), a block mask for
causal, checked against SDPA (max |dO| printed) before it is timed.
"""
import json
import sys
import time
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.flex_attention import create_block_mask, flex_attention
from triton.testing import do_bench

# (label, heads, head dim, causal) as fa3_check.cu's timing lines
CASES = [("d128 full", 32, 128, False), ("d128 causal", 32, 128, True),
         ("d64 full", 32, 64, False), ("d64 causal", 32, 64, True),
         ("d256 full", 8, 256, False), ("d256 causal", 8, 256, True)]
B, S = 2, 8192


def kept_flops(h, d, causal):
    pairs = S * (S + 1) // 2 if causal else S * S
    return 4.0 * B * h * d * pairs


def main():
    warnings.filterwarnings("ignore", category=UserWarning)
    out = sys.argv[1] if len(sys.argv) > 1 else None
    flex = torch.compile(flex_attention, dynamic=False)
    rows = []
    meta = {"date": time.strftime("%Y-%m-%d"), "gpu": torch.cuda.get_device_name(),
            "torch": torch.__version__, "cuda": torch.version.cuda}
    print(f"{meta['gpu']}  torch {meta['torch']}  cuda {meta['cuda']}", flush=True)
    for label, h, d, causal in CASES:
        g = torch.Generator(device="cuda").manual_seed(1)
        q, k, v = (torch.randn(B, h, S, d, device="cuda", dtype=torch.bfloat16, generator=g)
                   for _ in range(3))
        flops = kept_flops(h, d, causal)
        row = {"case": label, "heads": h, "head_dim": d, "causal": causal}
        best = None
        for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION,
                        SDPBackend.EFFICIENT_ATTENTION):
            name = backend.name.split("_")[0].lower()
            try:
                with sdpa_kernel([backend]):
                    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                    torch.cuda.synchronize()
                    ms = do_bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                                  warmup=100, rep=500, return_mode="median")
            except Exception as e:  # noqa: BLE001  a backend refusing the case
                row[f"sdpa_{name}_error"] = type(e).__name__
                continue
            row[f"sdpa_{name}_tflops"] = round(flops / ms / 1e9, 1)
            if best is None or ms < best[1]:
                best = (name, ms, ref)
        if best:
            row["sdpa_backend"], row["sdpa_ms"] = best[0], round(best[1], 4)
            row["sdpa_tflops"] = round(flops / best[1] / 1e9, 1)
        try:
            kw = {}
            if causal:
                kw["block_mask"] = create_block_mask(lambda b, hh, qi, ki: qi >= ki, None, None, S, S)
            o = flex(q, k, v, **kw)
            if best:
                row["flex_max_abs_diff"] = float((o.float() - best[2].float()).abs().max())
            ms = do_bench(lambda: flex(q, k, v, **kw), warmup=100, rep=500, return_mode="median")
            row["flex_ms"], row["flex_tflops"] = round(ms, 4), round(flops / ms / 1e9, 1)
        except Exception as e:  # noqa: BLE001
            row["flex_error"] = f"{type(e).__name__}: {e}"[:200]
        rows.append(row)
        print(f"{label:12s} sdpa {row.get('sdpa_tflops', '-')} ({row.get('sdpa_backend', '-')})  "
              f"flex {row.get('flex_tflops', '-')}  |O_flex - O_sdpa| {row.get('flex_max_abs_diff', '-')}",
              flush=True)
    if out:
        with open(out, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
