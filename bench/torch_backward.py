"""The backward as a training step sees it (issue 29): cubridge.attention's backward (the op's
autograd, the variant's lowered backward kernel) against flex_attention's (torch.compile, block
mask built once) and SDPA's fastest backend, in one process on the lent GPU.

    PYTHONPATH=build-dev/python python3 bench/torch_backward.py --out $OUT/torch_backward.json

bf16, d=128, Llama2-7B heads (32/32), B * S = 16k tokens. Backward time = (forward + backward)
- forward, each the median of CUDA-event timings; TFLOP/s on kept elements, backward counting
2.5x the forward's 4 * B * H * D * kept. The first call of each variant adapts it (not timed)."""

import argparse
import json
import os
import sys
import tempfile

import torch

if not torch.cuda.is_available():
    print("torch_backward: no CUDA GPU here: skipped")
    sys.exit(77)
os.environ.setdefault("CUBRIDGE_TORCH_CACHE", tempfile.mkdtemp(prefix="cubridge-bench-bwd-"))

import cubridge  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from torch.nn.attention.flex_attention import create_block_mask, flex_attention  # noqa: E402

DEV = "cuda"


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def window(b, h, q_idx, kv_idx):
    return (q_idx - kv_idx).abs() <= 256


SLOPES = torch.linspace(-0.5, -0.01, 32, device=DEV)


def alibi(score, b, h, q_idx, kv_idx):
    return score + SLOPES[h] * (kv_idx - q_idx)


def softcap(score, b, h, q_idx, kv_idx):
    return 30.0 * torch.tanh(score / 30.0)


def identity(score, b, h, q_idx, kv_idx):
    return score


VARIANTS = {  # name: (score_mod, mask_mod); full attention is the identity score_mod
    "full": (identity, None),
    "causal": (None, causal),
    "sliding_window_256": (None, window),
    "alibi_causal": (alibi, causal),
    "softcap": (softcap, None),
}


def kept(mask_mod, s):
    if mask_mod is None:
        return s * s
    i = torch.arange(s, device=DEV)
    return int(sum(mask_mod(0, 0, i[r:r + 1024, None], i[None, :]).sum().item()
                   for r in range(0, s, 1024)))


def timed(fn, reps):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def measure(forward, q, k, v, do, reps):
    def fwd():
        with torch.no_grad():
            forward(q, k, v)

    def both():
        for t in (q, k, v):
            t.grad = None
        forward(q, k, v).backward(do)
    f = timed(fwd, reps)
    fb = timed(both, reps)
    return f, fb - f


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seqlen", type=int, default=8192)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    s, h, d = args.seqlen, 32, 128
    b = 16384 // s
    g = torch.Generator(device=DEV).manual_seed(0)
    q, k, v = (torch.randn(b, h, s, d, device=DEV, generator=g).bfloat16().requires_grad_()
               for _ in range(3))
    do = torch.randn(b, h, s, d, device=DEV, generator=g).bfloat16()
    flex = torch.compile(flex_attention)
    rows = []
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, bf16 B={b} H={h} S={s} "
          f"d={d}; backward TFLOP/s on kept elements (ms)")
    for name, (score_mod, mask_mod) in VARIANTS.items():
        n = kept(mask_mod, s)
        flops_bwd = 2.5 * 4 * b * h * d * n
        fn = cubridge.compile(score_mod=score_mod, mask_mod=mask_mod)
        row = {"variant": name, "density": n / (s * s)}
        ours = measure(lambda q, k, v: fn(q, k, v), q, k, v, do, args.reps)
        row["cubridge_ms"] = ours[1]
        bm = create_block_mask(mask_mod, None, None, s, s, device=DEV) if mask_mod else None
        theirs = measure(lambda q, k, v: flex(q, k, v, score_mod=score_mod, block_mask=bm),
                         q, k, v, do, args.reps)
        row["flex_ms"] = theirs[1]
        if score_mod in (None, identity) and mask_mod in (None, causal):
            best = None
            for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION):
                try:
                    with sdpa_kernel(backend):
                        t = measure(lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(
                            q, k, v, is_causal=mask_mod is causal), q, k, v, do, args.reps)[1]
                    if best is None or t < best[1]:
                        best = (backend.name, t)
                except RuntimeError:
                    continue
            if best:
                row["sdpa_backend"], row["sdpa_ms"] = best
        for key in ("cubridge", "flex", "sdpa"):
            if f"{key}_ms" in row:
                row[f"{key}_tflops"] = flops_bwd / (row[f"{key}_ms"] * 1e-3) / 1e12
        rows.append(row)
        print(f"{name:20s} cubridge {row['cubridge_tflops']:6.1f} ({row['cubridge_ms']:.2f})  "
              f"flex {row['flex_tflops']:6.1f} ({row['flex_ms']:.2f})"
              + (f"  sdpa[{row['sdpa_backend']}] {row['sdpa_tflops']:6.1f} ({row['sdpa_ms']:.2f})"
                 if "sdpa_ms" in row else ""), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "shape": [b, h, s, d], "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
