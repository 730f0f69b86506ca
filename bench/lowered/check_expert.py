"""An expert's own kernel.cu (its base program: full attention, MHA) built with nvcc and run
through its C launcher: correct at ragged shapes for bf16 / fp16 and head dims 64 / 128 / 256
against a dense fp32 reference (outputs poisoned with NaN first), then timed at S = 8k, batch 2,
32 heads (hdim 256: 8) against SDPA's fastest backend in the same process.
    python3 bench/lowered/check_expert.py cuir/experts/fa3_sm90 [--no-time] [--no-check] [--profile D]
(--no-check: one ragged shape per head dim instead of the whole set; --profile D: only two launches
at the timing shape of head dim D, for ncu --launch-skip 1 --launch-count 1.)
"""
import ctypes, math, os, sys, tempfile
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check  # noqa: E402

expert = os.path.abspath(sys.argv[1])
tmp = tempfile.mkdtemp()
# kernel.cu includes its headers relatively: built where it lives.
so = os.path.join(tmp, "base.so")
import subprocess  # noqa: E402
r = subprocess.run(["nvcc", "-shared", "-Xcompiler", "-fPIC", "-std=c++17", *check.arch_flags("sm_90"),
                    "-O3", "-o", so, os.path.join(expert, "kernel.cu")], capture_output=True, text=True)
if r.returncode != 0:
    print(r.stderr)
    sys.exit(2)
lib = check.load(so)

if "--profile" in sys.argv:
    d = int(sys.argv[sys.argv.index("--profile") + 1])
    s, b, h = 8192, 2, 32 if d < 256 else 8
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    o, lse = torch.empty_like(q), torch.empty(b, h, s, device="cuda")
    for _ in range(2):
        err, _, _ = check.run(lib, q, k, v, o, lse, 1 / math.sqrt(d), [], 0)
    sys.exit(err)


def check_case(dtype, code, d, b, h, sq, skv, pad=0):
    """One call against the dense reference (outputs poisoned with NaN first). `pad` > 0: O is a
    view of rows d + pad wide (row stride not a multiple of 8 for pad = 2: the epilogue's 4-byte
    stores instead of its quad-transposed 16-byte ones), and the padding must stay unwritten."""
    q = torch.randn(b, h, sq, d, device="cuda", dtype=dtype)
    k = torch.randn(b, h, skv, d, device="cuda", dtype=dtype)
    v = torch.randn(b, h, skv, d, device="cuda", dtype=dtype)
    wide = torch.full((b, h, sq, d + pad), float("nan"), device="cuda", dtype=dtype)
    o = wide[..., :d]
    lse = torch.full((b, h, sq), float("nan"), device="cuda")
    scale = 1 / math.sqrt(d)
    err, _, _ = check.run(lib, q, k, v, o, lse, scale, [], code)
    ro, rl = check.reference(q, k, v, scale, h, h, None, None, [])
    c = check.compare(err, o, lse, ro, rl)
    ok = c.ok and torch.isnan(wide[..., d:]).all().item()
    if not ok or (b, sq) == (2, 1000):
        stride = f" O row stride {d + pad}" if pad else ""
        print(f"{'OK  ' if ok else 'FAIL'} {str(dtype):15s} D={d:3d} {b}x{h}x{sq}x{skv}{stride} err={err} "
              f"max|dO|={c.max_do:.2e} max|dLSE|={c.max_dlse:.2e}", flush=True)
    return ok


failures = 0
torch.manual_seed(1)
dtypes = ((torch.bfloat16, 0), (torch.float16, 1))
for dtype, code in dtypes:
    for d in (64, 128, 256):
        shapes = ((2, 3, 1000, 777), (1, 2, 1, 1), (1, 2, 77, 4097), (2, 2, 1024, 1024), (1, 1, 300, 5))
        for shape in shapes[:1] if "--no-check" in sys.argv else shapes:
            failures += not check_case(dtype, code, d, *shape)
for dtype, code in dtypes:
    for d in (64, 128, 256):
        failures += not check_case(dtype, code, d, 2, 3, 1000, 777, pad=2)
print("correctness failures:", failures, flush=True)

if "--no-time" not in sys.argv:
    for d in (64, 128, 256):
        s, b, h = 8192, 2, 32 if d < 256 else 8
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        o, lse = torch.empty_like(q), torch.empty(b, h, s, device="cuda")
        p, ws, bufs = check.make_params(lib, q, k, v, o, lse, 1 / math.sqrt(d), [], 0)
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        ms = do_bench(lambda: lib.cubridge_attn_fwd(ctypes.byref(p), stream), warmup=25, rep=200,
                      return_mode="median")
        best = None
        for be in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION):
            try:
                with sdpa_kernel(be):
                    t = do_bench(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v), warmup=25,
                                 rep=200, return_mode="median")
                best = t if best is None else min(best, t)
            except RuntimeError:
                pass
        fl = 4 * b * h * s * s * d
        print(f"full D={d} S={s} B={b} H={h}: expert {fl / ms / 1e9:.1f} TFLOP/s ({ms:.3f} ms), "
              f"SDPA best {fl / best / 1e9:.1f} TFLOP/s", flush=True)
sys.exit(1 if failures else 0)
