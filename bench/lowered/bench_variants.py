"""Times lowered CuBridge kernels against FlexAttention and SDPA in one process, on one GPU.

    python3 bench/lowered/bench_variants.py DIR
DIR holds NAME_sm_90.cu, the kernel.cu that `cubridge-cli adapt examples/specs/NAME.py --local
--heads-q 32 --heads-kv 32 --seqlen 8192` wrote for each variant (prefix_lm with --param
prefix=2048). Llama2-7B heads (32/32), hdim 128, bf16, S=8192, batch 2 (16k tokens). TFLOP/s count
kept elements only. Each CuBridge output is compared with FlexAttention's before it is timed.
"""
import importlib.util
import math
import os
import sys
from concurrent.futures import ThreadPoolExecutor

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.flex_attention import create_block_mask, flex_attention
from triton.testing import do_bench

DIR = os.path.abspath(sys.argv[1])
sys.argv = sys.argv[:2]
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check  # noqa: E402  Params, run(), build()

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
S, B, H, D = 8192, 2, 32, 128
PARAMS = {"prefix_lm": {"prefix": 2048}}


def load_spec(name):
    spec = importlib.util.spec_from_file_location("cubridge_spec_" + name, os.path.join(ROOT, "examples/specs", name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules["cubridge_spec_" + name] = mod  # dynamo re-imports a traced function's module
    spec.loader.exec_module(mod)
    return mod


def bench(fn):
    return do_bench(fn, warmup=25, rep=200, return_mode="median")


def sdpa_best(q, k, v, **kw):
    best = None
    for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
        try:
            with sdpa_kernel([backend]):
                ms = bench(lambda: F.scaled_dot_product_attention(q, k, v, **kw))
        except RuntimeError:
            continue
        if best is None or ms < best[0]:
            best = (ms, backend.name.split("_")[0].lower())
    return best


def main():
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    rows = []
    names = ("full", "causal", "sliding_window", "global_sliding_window", "prefix_lm", "block_causal",
             "causal_document", "share_question", "relative_position", "alibi", "softcap",
             "alibi_window_softcap")
    with ThreadPoolExecutor(len(names)) as pool:  # nvcc runs are independent: build all at once
        libs = dict(zip(names, pool.map(lambda n: check.build_from(DIR, n), names)))
    for name in names:
        # A fresh compile per variant: past dynamo's recompile limit flex_attention would silently
        # fall back to its unfused path and its numbers would be meaningless.
        torch._dynamo.reset()
        flex = torch.compile(flex_attention, dynamic=False)
        mod = load_spec(name)
        params = PARAMS.get(name, {})
        doc = check.bench_documents(S).cuda()
        uses_doc = "doc" in (getattr(mod, "mask_mod", None).__code__.co_varnames if hasattr(mod, "mask_mod") else ())
        extra = {"doc": doc} if uses_doc else {}
        mask_mod = (lambda b, h, q, kv, m=mod: m.mask_mod(b, h, q, kv, **params, **extra)) if hasattr(mod, "mask_mod") else None
        score_mod = (lambda s, b, h, q, kv, m=mod: m.score_mod(s, b, h, q, kv)) if hasattr(mod, "score_mod") else None

        q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        scale = 1 / math.sqrt(D)
        qi, ki = torch.arange(S, device="cuda").view(-1, 1), torch.arange(S, device="cuda").view(1, -1)
        dense = mask_mod(torch.tensor(0, device="cuda"), torch.tensor(0, device="cuda"), qi, ki) if mask_mod else None
        kept = dense.sum().item() if dense is not None else S * S
        flops = 4 * B * H * kept * D

        block_mask = create_block_mask(mask_mod, None, None, S, S) if mask_mod else None
        ref = flex(q, k, v, score_mod=score_mod, block_mask=block_mask)
        f_ms = bench(lambda: flex(q, k, v, score_mod=score_mod, block_mask=block_mask))

        lib = check.load(libs[name])
        o, lse = torch.empty_like(q), torch.empty(B, H, S, device="cuda")
        bufs = [doc] if uses_doc else []  # already on the GPU: no copy inside the timing
        err, _, _ = check.run(lib, q, k, v, o, lse, scale, bufs, 0)
        diff = (o.float() - ref.float()).abs().max().item()
        c_ms = bench(lambda: check.run(lib, q, k, v, o, lse, scale, bufs, 0))

        sd = None
        if score_mod is None or name == "full":
            if name in ("full",):
                sd = sdpa_best(q, k, v)
            elif name == "causal":
                sd = sdpa_best(q, k, v, is_causal=True)
            else:
                sd = sdpa_best(q, k, v, attn_mask=dense)
        row = (name, kept / (S * S), flops / (c_ms * 1e9), flops / (f_ms * 1e9),
               flops / (sd[0] * 1e9) if sd else None, sd[1] if sd else "-", err, diff)
        rows.append(row)
        print(f"{name:22s} density {row[1]:.3f}  cubridge {row[2]:6.1f}  flex {row[3]:6.1f}  "
              f"sdpa {row[4] if row[4] is None else round(row[4], 1)} ({row[5]})  err={err} max|O-flex|={diff:.2e}",
              flush=True)
    print("\n| variant | density | CuBridge (lowered, sm_80 expert) | FlexAttention | SDPA (backend) | vs Flex |")
    print("|---|---|---|---|---|---|")
    for n, dens, c, f, s, backend, err, diff in rows:
        sd = f"{s:.1f} ({backend})" if s else "—"
        print(f"| {n} | {dens:.3f} | {c:.1f} | {f:.1f} | {sd} | {c / f:.2f}x |")


if __name__ == "__main__":
    main()
