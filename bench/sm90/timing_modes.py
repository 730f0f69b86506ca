"""Does the length of a timing change what it measures? Times lowered full-attention kernels
(NAME_sm_90.cu from bench/make_kernels.sh) and cuDNN's SDPA at one shape with do_bench at several
rep lengths, in rotation, while nvidia-smi samples the SM clock and the board power. Written for
the matrix's candidate mode, whose pick (timed in rotation at rep 20 ms) came out 7-8% slower when
timed alone at rep 60 ms in the 405B-head 8k rows only.
    python3 bench/sm90/timing_modes.py S HQ HKV KERNEL.cu [KERNEL2.cu ...] [--rounds N]
        [--reps 20,60,200] [--causal] [--heat-ms MS] [--no-check] [--zero-kv-cols N]
        [--unchecked]
Prints one line per timing and a summary per (kernel, rep): median TFLOP/s, mean SM clock, power.
bf16, head dim 128, batch 16384 // S; full attention, or causal with --causal (every kernel must
compute that, unless --no-check: then a kernel's O is only checked for NaN, for score mods and
experiments that compute something else at the same shape). --heat-ms runs bf16 matmuls for that
long before each round, as the matrix's eager PyTorch runs before its CuBridge timings.
--zero-kv-cols N zeroes the last N head-dim columns of K and V: the same bytes move, but the
tensor cores multiply zeros there (at the 700 W limit the data's power shows in the clock).
--unchecked skips even the NaN check (experiments that leave O unwritten)."""
import argparse, ctypes, math, os, statistics, subprocess, sys, threading, time

ap = argparse.ArgumentParser()
ap.add_argument("s", type=int)
ap.add_argument("hq", type=int)
ap.add_argument("hkv", type=int)
ap.add_argument("kernels", nargs="+")
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--reps", default="20,60,200")
ap.add_argument("--causal", action="store_true")
ap.add_argument("--heat-ms", type=float, default=0)
ap.add_argument("--no-check", action="store_true")
ap.add_argument("--zero-kv-cols", type=int, default=0)
ap.add_argument("--unchecked", action="store_true")
args = ap.parse_args()
sys.argv = [sys.argv[0], "."]  # check.py reads its own argv at import
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lowered"))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from triton.testing import do_bench  # noqa: E402
import check  # noqa: E402

D, s, hq, hkv = 128, args.s, args.hq, args.hkv
b = 16384 // s
flops = 4 * b * hq * (s * (s + 1) // 2 if args.causal else s * s) * D
q = torch.randn(b, hq, s, D, device="cuda", dtype=torch.bfloat16)
k, v = (torch.randn(b, hkv, s, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
if args.zero_kv_cols:
    k[..., D - args.zero_kv_cols:] = 0
    v[..., D - args.zero_kv_cols:] = 0
scale = 1 / math.sqrt(D)
stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)

# Build every kernel at once (nvcc takes ~12 s each), as run_matrix.py does: NAME.so beside it.
libs = check.load_files(args.kernels)

ref = F.scaled_dot_product_attention(q, k.repeat_interleave(hq // hkv, 1),
                                     v.repeat_interleave(hq // hkv, 1), is_causal=args.causal).float()
calls = {}
for src, lib in zip(args.kernels, libs):
    o = torch.full_like(q, float("nan"))
    lse = torch.empty(b, hq, s, device="cuda", dtype=torch.float32)
    p, ws, _ = check.make_params(lib, q, k, v, o, lse, scale, [])
    err = lib.cubridge_attn_fwd(ctypes.byref(p), stream)
    torch.cuda.synchronize()
    diff = (o.float() - ref).abs().max().item()
    if err or not (diff < 2e-2 or args.unchecked or
                   (args.no_check and not torch.isnan(o).any().item())):
        sys.exit(f"timing_modes: {src} launcher {err}, max |O - O_sdpa| {diff:.2e}")
    name = check.file_label(src)
    keep = (lib, p, ws, o, lse)
    calls[name] = (lambda keep=keep: keep[0].cubridge_attn_fwd(ctypes.byref(keep[1]), stream))
k_rep, v_rep = k.repeat_interleave(hq // hkv, 1), v.repeat_interleave(hq // hkv, 1)


def cudnn():
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        return F.scaled_dot_product_attention(q, k_rep, v_rep, is_causal=args.causal)


calls["sdpa cudnn (kv rep.)"] = cudnn

# nvidia-smi every 20 ms; each line stamped with this process's clock as it arrives.
samples = []
smi = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu",
                        "--format=csv,noheader,nounits", "-lms", "20"],
                       stdout=subprocess.PIPE, text=True)


def read_smi():
    for line in smi.stdout:
        try:
            clk, pw, temp = (float(x) for x in line.split(","))
            samples.append((time.time(), clk, pw, temp))
        except ValueError:
            pass


threading.Thread(target=read_smi, daemon=True).start()
time.sleep(0.5)
records = []
names = list(calls)
reps = [int(r) for r in args.reps.split(",")]
print(f"S={s} B={b} {hq}/{hkv} d={D} bf16 {'causal' if args.causal else 'full'}, heat {args.heat_ms} ms, "
      f"{torch.cuda.get_device_name()}", flush=True)
heat_a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)


def heat():
    end = time.time() + args.heat_ms / 1000
    while time.time() < end:
        for _ in range(20):
            heat_a @ heat_a
        torch.cuda.synchronize()


for rnd in range(args.rounds):
    heat()
    for rep in reps:
        for j in range(len(names)):
            name = names[(rnd + j) % len(names)]
            t0 = time.time()
            ms = do_bench(calls[name], warmup=10, rep=rep, return_mode="median")
            t1 = time.time()
            win = [x for x in samples if t0 <= x[0] <= t1]
            clk = statistics.mean(x[1] for x in win) if win else float("nan")
            pw = statistics.mean(x[2] for x in win) if win else float("nan")
            records.append((name, rep, flops / ms / 1e9, clk, pw))
            print(f"round {rnd} rep {rep:4d} ms  {name:32s} {flops / ms / 1e9:6.1f} TFLOP/s  "
                  f"SM {clk:6.0f} MHz  {pw:5.0f} W  ({len(win)} samples)", flush=True)
smi.terminate()
print("\n| timing | rep (ms) | median TFLOP/s | mean SM clock (MHz) | mean power (W) |")
print("|---|---|---|---|---|")
for name in names:
    for rep in reps:
        mine = [r for r in records if r[0] == name and r[1] == rep]
        print(f"| {name} | {rep} | {statistics.median(r[2] for r in mine):.1f} | "
              f"{statistics.mean(r[3] for r in mine):.0f} | {statistics.mean(r[4] for r in mine):.0f} |")
