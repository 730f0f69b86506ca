"""The backward as a training step sees it (issues 29, 30): cubridge.attention's backward (the
op's autograd, the variant's lowered backward kernel) against flex_attention's (torch.compile,
block mask built once) and SDPA's fastest backend, in one process on the lent GPU.

    PYTHONPATH=build-dev/python python3 bench/torch_backward.py --out $OUT/torch_backward.json
    ... --heads llama2-7b,qwen2.5-72b,llama3.1-405b --head-dim 64,128 --seqlen 8192,1024 \
        --deterministic --variants full,causal

bf16, B * S = 16k tokens; by default d=128, Llama2-7B heads (32/32), S = 8k, every variant below.
Backward time = (forward + backward) - forward, each the median of CUDA-event timings; TFLOP/s on
kept elements, backward counting 2.5x the forward's 4 * B * Hq * D * kept. With --deterministic
CuBridge's backward is timed again under torch.use_deterministic_algorithms (issue 30: within
15% of the fast mode). With --kernels one more forward + backward of CuBridge's runs under
torch.profiler and the row gets the backward's kernels by name with their GPU times (the
preprocess, the block tables, the attention, the postprocess), so that a short walk's fixed
costs show beside its main kernel. With --kept-tables CuBridge is timed again with the op
keeping each geometry's block tables (CUBRIDGE_KEEP_TABLES=1: no table kernels a call where they
depend on the geometry alone), paired in the process. The first call of each variant adapts it
(not timed). Where both ran, a row's dQ, dK and dV are compared with Flex's on the same inputs
(`grads_vs_flex`: the largest difference over Flex's largest element; the row says GRADIENTS
DIFFER past GRADS_VS_FLEX), so that a fast row is also a right one.

Issue 30's matrix over every example and generality spec (their functions bound to their params
and captured tensors as tests/python/gpu_check.py binds them; the generality tensors' shapes from
the suite's reports, `CUBRIDGE_SUITE=generality bash bench/make_kernels.sh DIR` here):

    ... --specs 'generality (alibi|softcap)' --suite-kernels DIR --seqlen 8192,1024

`--specs REGEX` picks the cases by name ("example NAME", "generality NAME"); all variants adapt
side by side first (gpu_check's prefetch). `--warm N` first compiles every variant in N
processes at once (CuBridge's modules and Flex's graphs, into the caches on disk that the timing
then loads; Flex's ~30 s a variant would otherwise make the 49 specs at two lengths an hour):

    ... --specs . --suite-kernels DIR --warm 8 --seqlen 8192 --reps 5

`--skip-timed LOG` leaves out the variants that an earlier run's log, at the same shape, has a
complete row for: a matrix that one device call's time cut is finished by the next (session 24);
a row where either side failed runs again.

Flex is not run on the specs of --no-flex (default: the four whose negative indexing of
captured tensors Flex does not implement: one faults and takes the CUDA context with it;
docs/benchmarks-history.md, session 5)."""

import argparse
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import torch

if not torch.cuda.is_available():
    print("torch_backward: no CUDA GPU here: skipped")
    sys.exit(77)
os.environ.setdefault("CUBRIDGE_TORCH_CACHE", tempfile.mkdtemp(prefix="cubridge-bench-bwd-"))

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cubridge  # noqa: E402
import suite as suites  # noqa: E402  (bench/suite.py)
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from torch.nn.attention.flex_attention import create_block_mask, flex_attention  # noqa: E402

DEV = "cuda"


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def window(b, h, q_idx, kv_idx):
    return (q_idx - kv_idx).abs() <= 256


SLOPES = torch.linspace(-0.5, -0.01, 256, device=DEV)  # enough for every head config below


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
    if reps == 0:  # compiled and run once, not timed (--warm)
        return 0.0
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def backward_kernels(forward, q, k, v, do):
    """GPU time (ms) per kernel name of one forward + backward, the forward's kernels too (the
    names say which is which), summed over launches of the same name."""
    from torch.profiler import ProfilerActivity, profile
    for t in (q, k, v):
        t.grad = None
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        forward(q, k, v).backward(do)
        torch.cuda.synchronize()
    times = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            name = e.name[:80]
            times[name] = times.get(name, 0.0) + e.device_time_total / 1e3
    return dict(sorted(times.items(), key=lambda kv: -kv[1]))


# The largest difference a row's gradients may show from Flex's, relative to Flex's largest: two
# bf16 kernels' sums in different orders differ by ~1e-2 of the largest; a wrong block table or
# mask shows as O(1).
GRADS_VS_FLEX = 0.05


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


HEADS = {  # name: (query heads, kv heads) at d 128; other head dims keep Hq * D
    "llama2-7b": (32, 32),
    "qwen2.5-72b": (64, 8),
    "llama3.1-405b": (128, 8),
}


def sdpa_best(mask_mod, q, k, v, do, reps, gqa):
    best = None
    for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION):
        try:
            with sdpa_kernel(backend):
                t = measure(lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(
                    q, k, v, is_causal=mask_mod is causal, enable_gqa=gqa), q, k, v, do, reps)[1]
            if best is None or t < best[1]:
                best = (backend.name, t)
        except RuntimeError:
            continue
    return best


NO_FLEX = "distance_kernel_mixture|streaming_sinks_window|circular_fmod_table|additive_bias_bf16"


def kept_by_head(mask_mod, b, hq, s, per_bh):
    """Kept elements over every (batch, head) where the mask reads them (per_bh), else
    kept(mask_mod, s) for each."""
    if mask_mod is None or not per_bh:
        return b * hq * kept(mask_mod, s)
    i = torch.arange(s, device=DEV)
    total = 0
    for bi in range(b):
        for hi in range(hq):
            bt, ht = torch.tensor(bi, device=DEV), torch.tensor(hi, device=DEV)
            total += int(sum(mask_mod(bt, ht, i[r:r + 1024, None], i[None, :]).sum().item()
                             for r in range(0, s, 1024)))
    return total


def timed_in(log):
    """The case names an earlier run's log has a complete row for (`NAME cubridge T (ms) flex
    T (ms)`, or Flex left out by --no-flex): a row where either side failed runs again."""
    row = re.compile(r"((?:example|generality) .+?) cubridge\s+[0-9.]+ \(.*?flex\s+"
                     r"(?:[0-9.]+ \(|-- \(not run \(--no-flex\)\))")
    with open(log) as f:
        return {m.group(1).rstrip() for m in map(row.match, f) if m}


def spec_variants(pattern, suite_kernels, b, hq, hkv, s, skip=frozenset(), shard=None):
    """{case name: (score_mod, mask_mod)} of the example and generality specs matching pattern
    and not in skip (of those, every shard[1]-th from the shard[0]-th: a --warm child's, whose
    captured tensors alone it makes), bound at this shape (tests/python/gpu_check.py's
    spec_cases), and the names whose mask reads its batch or head index."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, os.path.join(root, "tests", "python"))
    import gpu_check
    shape = dict(batch=b, heads_q=hq, heads_kv=hkv, seqlen_q=s, seqlen_kv=s)
    table, per_bh, matched = {}, set(), [0]

    def keep(name):
        if not re.search(pattern, name) or name in skip:
            return False
        matched[0] += 1
        return shard is None or (matched[0] - 1) % shard[1] == shard[0]
    for name, mods in gpu_check.spec_cases(shape, suite_kernels, keep):
        table[name] = (mods["score_mod"], mods["mask_mod"])
        # The binder's closure passes b and h on to the spec's own function (its `fn`): whether
        # the mask reads them is that function's question.
        mask = mods["mask_mod"]
        if mask is not None and suites.reads_batch_or_head(
                inspect.getclosurevars(mask).nonlocals.get("fn", mask), 4):
            per_bh.add(name)
    return table, per_bh


def warm_variants(fns, table, per_bh, no_flex, flex, q, k, v, do, gqa):
    """What timing a variant compiles, without the timing: CuBridge's forward and backward (the
    op's modules, published into their kernel folders) and Flex's two graphs (the forward under
    no_grad, forward + backward with grad), so that the timing process loads them from the
    caches on disk."""
    b, hq, s = q.shape[0], q.shape[1], q.shape[2]
    for name, fn in fns.items():
        score_mod, mask_mod = table[name]
        t0 = time.monotonic()
        try:
            measure(lambda q, k, v: fn(q, k, v, enable_gqa=gqa), q, k, v, do, 0)
            if no_flex is None or not re.search(no_flex, name):
                bh = name in per_bh  # the block mask's shape, as the timing builds it
                bm = create_block_mask(mask_mod, b if bh else None, hq if bh else None, s, s,
                                       device=DEV) if mask_mod else None
                measure(lambda q, k, v: flex(q, k, v, score_mod=score_mod, block_mask=bm,
                                             enable_gqa=gqa), q, k, v, do, 0)
            print(f"   warmed {name} in {time.monotonic() - t0:.0f} s", flush=True)
        except Exception as e:  # noqa: BLE001 - the timing process records it
            print(f"   warming {name}: {str(e).splitlines()[0][:160]}", flush=True)


def run_shape(heads, d, s, variants, reps, deterministic, flex, kernels=False, specs=None,
              warm_shard=None, no_flex=None, kept_tables=False):
    hq, hkv = heads
    hq, hkv = max(1, hq * 128 // d), max(1, hkv * 128 // d)
    b = max(1, 16384 // s)
    gqa = hq != hkv
    table, per_bh = VARIANTS, set()
    if specs is not None:  # (pattern, suite kernels folder, specs Flex does not run, skip)
        table, per_bh = spec_variants(specs[0], specs[1], b, hq, hkv, s, specs[3], warm_shard)
        variants, no_flex = list(table), specs[2]
    elif warm_shard is not None:  # (i, n): this process compiles every n-th variant from the i-th
        variants = variants[warm_shard[0]::warm_shard[1]]
    g = torch.Generator(device=DEV).manual_seed(0)
    q = torch.randn(b, hq, s, d, device=DEV, generator=g).bfloat16().requires_grad_()
    k, v = (torch.randn(b, hkv, s, d, device=DEV, generator=g).bfloat16().requires_grad_()
            for _ in range(2))
    do = torch.randn(b, hq, s, d, device=DEV, generator=g).bfloat16()
    print(f"-- bf16 B={b} Hq={hq} Hkv={hkv} S={s} d={d}: backward TFLOP/s on kept elements (ms)")
    rows = []
    fns = {name: cubridge.compile(score_mod=table[name][0], mask_mod=table[name][1])
           for name in variants}
    if specs is not None:
        import gpu_check
        t0 = time.monotonic()
        adapted = gpu_check.prefetch(fns, q, k, v)
        print(f"   adapted {len(fns)} variants side by side in {time.monotonic() - t0:.0f} s",
              flush=True)
    if warm_shard is not None:
        for future in adapted.values() if specs is not None else []:
            future.result()
        warm_variants(fns, table, per_bh, no_flex, flex, q, k, v, do, gqa)
        return []
    for name in variants:
        score_mod, mask_mod = table[name]
        n = kept_by_head(mask_mod, b, hq, s, name in per_bh)
        flops_bwd = 2.5 * 4 * d * n
        fn = fns[name]

        def ours(q, k, v):  # CuBridge's call of this row, in every timing of it
            return fn(q, k, v, enable_gqa=gqa)

        row = {"variant": name, "shape": [b, hq, hkv, s, d], "density": n / (b * hq * s * s)}
        grads = None  # CuBridge's dQ, dK, dV, against Flex's where both ran
        try:
            if specs is not None:
                adapted[name].result()
            row["cubridge_ms"] = measure(ours, q, k, v, do, reps)[1]
            grads = [t.grad.clone() for t in (q, k, v)] if reps > 0 else None
            if kept_tables:
                # The op keeps a geometry's block tables where they depend on it alone
                # (CUBRIDGE_KEEP_TABLES, read each call): the same calls timed with them kept.
                os.environ["CUBRIDGE_KEEP_TABLES"] = "1"
                try:
                    row["cubridge_kept_ms"] = measure(ours, q, k, v, do, reps)[1]
                finally:
                    os.environ.pop("CUBRIDGE_KEEP_TABLES")
            if kernels:
                row["cubridge_kernels_ms"] = backward_kernels(ours, q, k, v, do)
            if deterministic:
                torch.use_deterministic_algorithms(True)
                try:
                    row["cubridge_det_ms"] = measure(ours, q, k, v, do, reps)[1]
                finally:
                    torch.use_deterministic_algorithms(False)
        except Exception as e:  # noqa: BLE001 - recorded (e.g. a head dim without a backward)
            row["cubridge_error"] = str(e).splitlines()[0][:200]
        if no_flex is not None and re.search(no_flex, name):
            row["flex_error"] = "not run (--no-flex)"
        else:
            try:
                bh = name in per_bh
                bm = create_block_mask(mask_mod, b if bh else None, hq if bh else None, s, s,
                                       device=DEV) if mask_mod else None
                row["flex_ms"] = measure(lambda q, k, v: flex(q, k, v, score_mod=score_mod,
                                                              block_mask=bm, enable_gqa=gqa),
                                         q, k, v, do, reps)[1]
                if grads is not None:
                    row["grads_vs_flex"] = max(
                        ((a.float() - t.grad.float()).abs().max() /
                         t.grad.float().abs().max().clamp_min(1e-30)).item()
                        for a, t in zip(grads, (q, k, v)))
            except Exception as e:  # noqa: BLE001 - recorded; the row keeps CuBridge's time
                row["flex_error"] = str(e).splitlines()[0][:200]
        if score_mod in (None, identity) and mask_mod in (None, causal):
            best = sdpa_best(mask_mod, q, k, v, do, reps, gqa)
            if best:
                row["sdpa_backend"], row["sdpa_ms"] = best
        for key in ("cubridge", "cubridge_kept", "cubridge_det", "flex", "sdpa"):
            if f"{key}_ms" in row:
                row[f"{key}_tflops"] = flops_bwd / (row[f"{key}_ms"] * 1e-3) / 1e12
        rows.append(row)
        line = f"{name:20s} cubridge "
        line += (f"{row['cubridge_tflops']:6.1f} ({row['cubridge_ms']:.2f})" if "cubridge_ms" in row
                 else f"-- ({row['cubridge_error'][:60]})")
        if "cubridge_kept_ms" in row:
            line += (f"  kept tables {row['cubridge_kept_tflops']:6.1f} "
                     f"({row['cubridge_kept_ms']:.2f})")
        if "cubridge_det_ms" in row:
            line += f"  deterministic {row['cubridge_det_tflops']:6.1f} ({row['cubridge_det_ms']:.2f})"
        line += (f"  flex {row['flex_tflops']:6.1f} ({row['flex_ms']:.2f})" if "flex_ms" in row
                 else f"  flex -- ({row['flex_error'][:40]})")
        if "flex_ms" in row and "cubridge_ms" in row:
            row["cubridge_over_flex"] = row["flex_ms"] / row["cubridge_ms"]
            line += f"  {row['cubridge_over_flex']:.2f}x"
        if "sdpa_ms" in row:
            line += f"  sdpa[{row['sdpa_backend']}] {row['sdpa_tflops']:6.1f} ({row['sdpa_ms']:.2f})"
        if row.get("grads_vs_flex", 0.0) > GRADS_VS_FLEX:
            line += ("  GRADIENTS DIFFER from Flex's (max |d| / max |flex| "
                     f"{row['grads_vs_flex']:.3g})")
        print(line, flush=True)
        for kname, ms in row.get("cubridge_kernels_ms", {}).items():
            print(f"    {ms:8.3f} ms  {kname}", flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seqlen", default="8192", help="comma-separated sequence lengths")
    ap.add_argument("--head-dim", default="128", help="comma-separated head dims")
    ap.add_argument("--heads", default="llama2-7b",
                    help="comma-separated head configs: " + ", ".join(HEADS))
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated variants")
    ap.add_argument("--deterministic", action="store_true",
                    help="also time CuBridge's deterministic mode")
    ap.add_argument("--kernels", action="store_true",
                    help="also CuBridge's kernels' GPU times (torch.profiler), per row")
    ap.add_argument("--kept-tables", action="store_true",
                    help="also time CuBridge with the op keeping each geometry's block tables "
                         "(CUBRIDGE_KEEP_TABLES=1) in the same process")
    ap.add_argument("--specs", metavar="REGEX",
                    help="every example and generality spec whose case name matches, instead "
                         "of --variants")
    ap.add_argument("--suite-kernels", default="",
                    help="with --specs: bench/make_kernels.sh's folder for the generality suite "
                         "(its reports give the captured tensors' shapes)")
    ap.add_argument("--no-flex", default=NO_FLEX,
                    help="the variants or specs Flex does not run (a regular expression; '.': "
                         "none, e.g. under ncu)")
    ap.add_argument("--skip-timed", metavar="LOG",
                    help="with --specs: leave out the variants an earlier run's log has a "
                         "complete row for (to finish a matrix that a device call's time cut)")
    ap.add_argument("--warm", type=int, default=0, metavar="N",
                    help="first compile every variant in N processes side by side (CuBridge's "
                         "modules and Flex's graphs into the caches on disk), then time them "
                         "here: Flex's ~30 s compile a variant is most of a --specs run")
    ap.add_argument("--warm-shard", default="", help=argparse.SUPPRESS)  # i/N: a --warm child
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    variants = args.variants.split(",")
    skip = frozenset(timed_in(args.skip_timed)) if args.skip_timed else frozenset()
    specs = (args.specs, args.suite_kernels, args.no_flex, skip) if args.specs else None
    if specs and not args.suite_kernels:
        sys.exit("torch_backward: --specs needs --suite-kernels DIR, the generality suite's "
                 "kernels (CUBRIDGE_SUITE=generality bash bench/make_kernels.sh DIR)")
    for name in (variants if specs is None else []) + args.heads.split(","):
        if name not in VARIANTS and name not in HEADS:
            sys.exit(f"torch_backward: unknown variant or head config {name!r}")
    # Every variant and shape compiles flex_attention anew (and again without grad for the
    # forward's timing): past dynamo's recompile limit (8) Flex would fall back to its unfused
    # eager path (session 23: softcap's then ran out of memory).
    import torch._dynamo
    for limit in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit"):
        if hasattr(torch._dynamo.config, limit):
            setattr(torch._dynamo.config, limit, 4096)
    # Static shapes, as bench/run_matrix.py compiles Flex: after its first recompiles dynamo would
    # make the shapes dynamic, and 7 of the matrix's variants then failed in inductor
    # ("unbacked_bindings", session 24), simple ones (softcap) among them.
    flex = torch.compile(flex_attention, dynamic=False)
    warm_shard = tuple(int(x) for x in args.warm_shard.split("/")) if args.warm_shard else None
    if args.warm > 0 and warm_shard is None:
        # The children share this process's caches: CUBRIDGE_TORCH_CACHE (set above) and
        # inductor's and the CLI's, which default to per-user folders.
        t0 = time.monotonic()
        children = [subprocess.Popen([sys.executable, os.path.abspath(__file__), *sys.argv[1:],
                                      "--warm-shard", f"{i}/{args.warm}"])
                    for i in range(args.warm)]
        codes = [c.wait() for c in children]
        print(f"warmed in {args.warm} processes in {time.monotonic() - t0:.0f} s (exit codes "
              f"{codes})", flush=True)
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    rows = []
    for heads in args.heads.split(","):
        for d in (int(x) for x in args.head_dim.split(",")):
            for s in (int(x) for x in args.seqlen.split(",")):
                for row in run_shape(HEADS[heads], d, s, variants, args.reps, args.deterministic,
                                     flex, args.kernels, specs, warm_shard, args.no_flex,
                                     args.kept_tables):
                    rows.append(dict(row, heads=heads))
    if warm_shard is not None:
        return
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
