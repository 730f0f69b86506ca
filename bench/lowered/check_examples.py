"""Ragged-shape check of the example kernels from bench/make_kernels.sh (DIR/NAME_sm_90.cu) at
head dims 64 and 128 (or --hdims), bf16 and fp16, MHA and GQA, against check.py's dense fp32
reference (outputs poisoned with NaN first). The shapes run both sides of the Hopper expert's
2048-row switch to 192-row tiles at head dim 64, with seqlen_q != seqlen_kv and single rows among
them, and the last-wave split of whole KV walks (one wave plus a few tiles, and fewer tiles than
SMs).
    python3 bench/lowered/check_examples.py DIR [--hdims 64,128,256]
Prints each failing case and "N failures of M"; exits non-zero on a failure."""
import math, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
args = sys.argv[1:]
HDIMS = (64, 128)
if len(args) == 3 and args[1] == "--hdims":
    try:
        HDIMS = tuple(int(d) for d in args[2].split(","))
    except ValueError:
        sys.exit(f"--hdims takes head dims separated by commas, e.g. 64,128,256 (got {args[2]!r})")
    args = args[:1]
if len(args) != 1:
    sys.exit(__doc__)
sys.argv, DIR = [sys.argv[0], "."], os.path.abspath(args[0])  # check.py reads argv at import
import torch  # noqa: E402
import check  # noqa: E402

# name: (mask_mod, score_mod) at the spec defaults make_kernels.sh lowers them with.
V = {
    "full": (None, None),
    "causal": (lambda b, h, q, kv: q >= kv, None),
    "sliding_window": (lambda b, h, q, kv: (q >= kv) & (q - kv <= 256), None),
    "prefix_lm_1k": (lambda b, h, q, kv: (kv < 256) | (q >= kv), None),
    "block_causal": (lambda b, h, q, kv: (q // 128) >= (kv // 128), None),
    "alibi": (None, lambda s, b, h, q, kv: s + (kv - q) * torch.exp2(-8.0 * (h + 1) / 32)),
    "relative_position": (None, lambda s, b, h, q, kv: s + (q - kv) * 0.01),
    "softcap": (None, lambda s, b, h, q, kv: 20.0 * torch.tanh(s / 20.0)),
}
# (batch, heads_q, heads_kv, seqlen_q, seqlen_kv): under 2048 query rows, then over.
SHAPES = ((2, 4, 4, 300, 300), (1, 8, 2, 577, 577), (3, 2, 2, 1, 65), (1, 4, 4, 191, 385),
          (2, 6, 3, 385, 192), (1, 2, 1, 1100, 1100), (1, 4, 4, 2500, 2500), (1, 8, 2, 2049, 3001),
          (2, 2, 2, 4100, 700), (1, 3, 3, 2048, 1))
# One wave and a few tiles more (1000 rows: 8 work tiles per head at 128 rows): where every tile
# walks the whole KV range, the kernel splits the last wave's walks (TailSplit); fewer tiles than
# SMs (most shapes above) split too.
_SMS = torch.cuda.get_device_properties(0).multi_processor_count
SHAPES += ((1, _SMS // 8 + 1, _SMS // 8 + 1, 1000, 1000),)
fails = total = 0
torch.manual_seed(1)
for name, (mask, smod) in V.items():
    lib = check.load(check.build_from(DIR, name))
    m = (lambda b, h, q, kv, B, f=mask: f(b, h, q, kv)) if mask else None
    for D in HDIMS:
        for dtype, code in ((torch.bfloat16, 0), (torch.float16, 1)):
            for (B, hq, hkv, sq, skv) in SHAPES:
                q, k, v, o, lse = check.make_inputs(B, hq, hkv, sq, skv, D, dtype)
                scale = 1 / math.sqrt(D)
                err, _, _ = check.run(lib, q, k, v, o, lse, scale, [], code)
                ro, rl = check.reference(q, k, v, scale, hq, hkv, m, smod, [])
                c = check.compare(err, o, lse, ro, rl)
                total += 1
                fails += not c.ok
                if not c.ok:
                    print(f"FAIL {name} D={D} {dtype} {(B, hq, hkv, sq, skv)} err={err} "
                          f"dO={c.max_do:.2e} dLSE={c.max_dlse:.2e}")
print(f"{fails} failures of {total}")
sys.exit(1 if fails else 0)
