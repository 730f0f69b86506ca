"""What the last-wave split (TailSplit, cuir/experts/fa3_sm90/scheduler.cuh) buys: one lowered
kernel of full attention (NAME_sm_90.cu from bench/make_kernels.sh), timed on the same inputs with
the workspace the plan asks for (the kernel splits the tail tiles' KV walks when the last wave of
persistent CTAs is partial) and with none (it cannot: the same kernel, unsplit), in rotation.
Shapes: fewer work tiles than SMs with long KV walks (chunked prefill against a long context),
Llama2 heads at 1k and 8k (4096 tiles: 31.03 waves on 132 SMs), and a shape of whole waves. The
parts per tail tile are the kernel's own, read from its split header in the workspace.
    python3 bench/sm90/tail_split.py KERNEL.cu [--rounds 3] [--rep-ms 40]
bf16, head dim 128; both outputs are checked against SDPA first. Prints a markdown table."""
import argparse, ctypes, math, os, statistics, sys

ap = argparse.ArgumentParser()
ap.add_argument("kernel")
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--rep-ms", type=int, default=40)
args = ap.parse_args()
sys.argv = [sys.argv[0], "."]  # check.py reads its own argv at import
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lowered"))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from triton.testing import do_bench  # noqa: E402
import check  # noqa: E402

D = 128
SMS = torch.cuda.get_device_properties(0).multi_processor_count
# (batch, heads_q, heads_kv, seqlen_q, seqlen_kv)
SHAPES = [(1, 4, 4, 512, 16384), (1, 16, 2, 256, 32768), (1, 8, 8, 1024, 8192),
          (16, 32, 32, 1024, 1024), (2, 32, 32, 8192, 8192), (1, 33, 33, 1024, 1024)]


src = os.path.abspath(args.kernel)
lib = check.load_files([src])[0]
stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
print(f"{torch.cuda.get_device_name(0)}, {SMS} SMs; {args.kernel}; rounds {args.rounds}, "
      f"rep {args.rep_ms} ms, median per mode\n")
print("| batch x heads (q/kv) x Sq x Skv | work tiles | parts per tail tile | split TFLOP/s | "
      "unsplit TFLOP/s | split / unsplit |")
print("|---|---|---|---|---|---|")
torch.manual_seed(0)
for (b, hq, hkv, sq, skv) in SHAPES:
    q = torch.randn(b, hq, sq, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, hkv, skv, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    ref = F.scaled_dot_product_attention(q, k.repeat_interleave(hq // hkv, 1),
                                         v.repeat_interleave(hq // hkv, 1)).float()
    modes = {}
    for mode in ("split", "unsplit"):
        o = torch.full_like(q, float("nan"))
        lse = torch.empty(b, hq, sq, device="cuda", dtype=torch.float32)
        p, ws, _ = check.make_params(lib, q, k, v, o, lse, 1 / math.sqrt(D), [])
        if mode == "unsplit":
            p.workspace, p.workspace_size = None, 0
        err = lib.cubridge_attn_fwd(ctypes.byref(p), stream)
        torch.cuda.synchronize()
        diff = (o.float() - ref).abs().max().item()
        if err or not diff < 2e-2:
            sys.exit(f"{mode} {(b, hq, hkv, sq, skv)}: launcher {err}, max |dO| {diff}")
        if mode == "split":
            # The kernel's split header (kernel.cu, SplitHeader: CTAs, parts) starts the split
            # area, at offset 0 of full attention's workspace (no block tables before it).
            s = ws[:8].view(torch.int32).tolist()[1]
        modes[mode] = (p, ws, o, lse)
    times = {m: [] for m in modes}
    for _ in range(args.rounds):
        for m, (p, ws, o, lse) in modes.items():
            times[m].append(do_bench(lambda: lib.cubridge_attn_fwd(ctypes.byref(p), stream),
                                     warmup=10, rep=args.rep_ms, return_mode="median"))
    flops = 4 * b * hq * sq * skv * D
    tf = {m: flops / statistics.median(t) / 1e9 for m, t in times.items()}
    tiles = -(-sq // 128) * hq * b
    print(f"| {b} x {hq}/{hkv} x {sq} x {skv} | {tiles} | {s} | {tf['split']:.1f} | "
          f"{tf['unsplit']:.1f} | {tf['split'] / tf['unsplit']:.3f} |", flush=True)
