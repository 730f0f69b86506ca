"""Times lowered kernels (the .so files check.py built in DIR) at S=8k, 16k tokens, bf16:
python3 bench/lowered/time_lowered.py DIR"""
import math, os, sys
import torch
from triton.testing import do_bench

sys.argv = sys.argv[:2]
import check  # noqa: E402  (same folder: Params and run())

DIR = os.path.abspath(sys.argv[1])
for name, causal, d in (("base", False, 128), ("causal", True, 128), ("sliding_window", None, 128)):
    lib = check.load(os.path.join(DIR, f"{name}.so"))
    s, b, h = 8192, 2, 32
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    o, lse = torch.empty_like(q), torch.empty(b, h, s, device="cuda")
    err, _, _ = check.run(lib, q, k, v, o, lse, 1 / math.sqrt(d), [], 0)
    ms = do_bench(lambda: check.run(lib, q, k, v, o, lse, 1 / math.sqrt(d), [], 0), warmup=25, rep=200,
                  return_mode="median")
    qi, ki = torch.arange(s).view(-1, 1), torch.arange(s).view(1, -1)
    kept = {False: s * s, True: s * (s + 1) / 2}.get(causal)
    if kept is None:
        kept = ((qi >= ki) & (qi - ki <= 256)).sum().item()
    print(f"lowered {name} S={s} B={b} H={h} D={d}: err={err} {ms:.3f} ms "
          f"{4 * b * h * kept * d / (ms * 1e-3) / 1e12:.1f} TFLOP/s (includes ctypes call overhead)")
