"""What a work tile costs beside its KV walk: times lowered full-attention kernels (NAME_sm_90.cu
from bench/make_kernels.sh) at one query shape against KV lengths of 1, 2, 4 and 8 blocks
multiples, and fits time = tiles x (fixed + blocks x per_block) per kernel. The fixed part is
what a work tile pays once (Q load, the first Q K^T and softmax with no P V under them, the last
P V alone, the epilogue); it is why short sequences run slower per FLOP than long ones.
    python3 bench/sm90/walk_length.py KERNEL.cu [KERNEL2.cu ...] [--sq 8192] [--heads 32]
        [--skv 1024,2048,4096,8192] [--rounds 3] [--rep-ms 60]
bf16, head dim 128, batch 16384 // sq; outputs checked against SDPA first. Timed in rotation;
prints TFLOP/s per (kernel, skv) and the fit per kernel in KV-block units of 128 keys, cuDNN's
(SDPA) alongside."""
import argparse, ctypes, math, os, statistics, sys

ap = argparse.ArgumentParser()
ap.add_argument("kernels", nargs="+")
ap.add_argument("--sq", type=int, default=8192)
ap.add_argument("--heads", type=int, default=32)
ap.add_argument("--skv", default="1024,2048,4096,8192")
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--rep-ms", type=int, default=60)
args = ap.parse_args()
sys.argv = [sys.argv[0], "."]  # check.py reads its own argv at import
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lowered"))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from triton.testing import do_bench  # noqa: E402
import check  # noqa: E402

D, h, sq = 128, args.heads, args.sq
b = max(1, 16384 // sq)
skvs = [int(x) for x in args.skv.split(",")]
stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
libs = check.load_files(args.kernels)
names = [check.file_label(k) for k in args.kernels]
torch.manual_seed(0)
q = torch.randn(b, h, sq, D, device="cuda", dtype=torch.bfloat16)
ms = {}  # (kernel, skv) -> median ms
for skv in skvs:
    k, v = (torch.randn(b, h, skv, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    ref = F.scaled_dot_product_attention(q, k, v).float()
    calls = []
    for name, lib in zip(names, libs):
        o = torch.full_like(q, float("nan"))
        lse = torch.empty(b, h, sq, device="cuda", dtype=torch.float32)
        p, ws, _ = check.make_params(lib, q, k, v, o, lse, 1 / math.sqrt(D), [])
        err = lib.cubridge_attn_fwd(ctypes.byref(p), stream)
        torch.cuda.synchronize()
        diff = (o.float() - ref).abs().max().item()
        if err or not diff < 2e-2:
            sys.exit(f"walk_length: {name} at skv {skv}: launcher {err}, max |O - O_sdpa| {diff:.2e}")
        keep = (lib, p, ws, o, lse)
        calls.append(lambda keep=keep: keep[0].cubridge_attn_fwd(ctypes.byref(keep[1]), stream))
    def cudnn(k=k, v=v):
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v)
    calls.append(cudnn)
    times = [[] for _ in calls]
    for r in range(args.rounds):
        for j in range(len(calls)):
            i = (r + j) % len(calls)
            times[i].append(do_bench(calls[i], warmup=10, rep=args.rep_ms, return_mode="median"))
    for name, t in zip(names + ["sdpa cudnn"], times):
        ms[name, skv] = statistics.median(t)

tiles = -(-sq // 128) * h * b
print(f"{torch.cuda.get_device_name(0)}; b {b} x {h} heads x sq {sq}, head dim {D}, bf16; "
      f"{tiles} work tiles of 128 rows; rounds {args.rounds}, rep {args.rep_ms} ms\n")
print("| kernel | " + " | ".join(f"skv {s}" for s in skvs) + " | fixed per tile (blocks) |")
print("|---|" + "---|" * len(skvs) + "---|")
for name in names + ["sdpa cudnn"]:
    xs = [s / 128 for s in skvs]
    ys = [ms[name, s] for s in skvs]
    # Least squares y = a + c x: a is the tiles' fixed cost, c the cost per KV block.
    mx, my = statistics.mean(xs), statistics.mean(ys)
    c = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    a = my - c * mx
    cells = [f"{4 * b * h * sq * s * D / ms[name, s] / 1e9:.1f}" for s in skvs]
    print(f"| {name} | " + " | ".join(cells) + f" | {a / c:.2f} |")
