#!/usr/bin/env python3
"""A backward expert (cuir/experts/EXPERT/kernel_bwd.cu, --expert: fa2_sm80 by default, or
fa3_sm90 on Hopper) on the GPU (issue 29, item 4).

Builds the kernel with nvcc beside a C shim (shim.cu) for this GPU's arch (sm_90a for fa3_sm90),
once per backward tile the pipeline uses (the tile_params the lowering writes: the base tile for
head dims 64 and 128, a narrower one for 256; BACKWARD_TILES), runs each at ragged shapes
(Sq != Skv both ways, tails in both directions, GQA and MQA, the head dims the tile serves, bf16
and fp16) on fresh random inputs, and compares dQ, dK and dV, every element, with the float64
autograd of attention: |got - want| <= atol_rel * scale + rtol * |want|, scale = max|want| but
at least a thousandth of the largest gradient's (the CPU verifier's rule,
pipeline/verify_backward.h). The outputs start as NaN, so an element the kernel never
writes fails. With --bench it also times the backward at the issue's shape (bf16, d 128,
B * S = 16k tokens) against SDPA's fastest backward and FlexAttention's, in the same process.

Exit status: 0 all cases match, 1 a mismatch or a build failure, 77 no GPU or no nvcc (skipped).
"""
import argparse
import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOLERANCE = {"bf16": (2e-2, 2e-2), "fp16": (4e-3, 4e-3)}


def skip(why):
    print(f"SKIPPED: {why}")
    sys.exit(77)


# Each expert's backward tiles (BLOCK_M, BLOCK_N) and the head dims checked on each
# (cuir/experts/*/descriptor.cc, BackwardTiles: the second tile is head dim 256's and the GPU
# stage's alternative at 128): the base tile's kernel_bwd.cu as it is, the others with their
# tile_params written in, as the lowering writes them.
BACKWARD_TILES = {
    "fa2_sm80": [((64, 128), (64, 128)), ((32, 64), (128, 256))],
    "fa3_sm90": [((64, 128), (64, 128)), ((64, 64), (128, 256))],
}


def build(out_dir, arch, expert, tile, defines=()):
    nvcc = os.environ.get("NVCC") or shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not os.path.exists(nvcc):
        skip("no nvcc")
    name = f"{tile[0]}x{tile[1]}" + "".join("_" + re.sub(r"\W", "_", d) for d in defines)
    lib = os.path.join(out_dir, f"libcubridge_bwd_check_{name}.so")
    target = (["-gencode", "arch=compute_90a,code=sm_90a"] if expert == "fa3_sm90"
              else [f"-arch={arch}"])
    expert_dir = os.path.normpath(os.path.join(HERE, "../../../cuir/experts", expert))
    with open(os.path.join(expert_dir, "kernel_bwd.cu")) as f:
        source = f.read()
    for param, value in zip(("BLOCK_M", "BLOCK_N"), tile):
        source, n = re.subn(rf"^constexpr int {param} = \d+;", f"constexpr int {param} = {value};",
                            source, flags=re.M)
        if n != 1:
            print(f"kernel_bwd.cu of {expert}: no tile_params line for {param}")
            sys.exit(1)
    # The copy's includes resolve against the expert's folder (-I), as the original's do.
    kernel_path = os.path.join(out_dir, f"kernel_bwd_{name}.cu")
    with open(kernel_path, "w") as f:
        f.write(source)
    cmd = [nvcc, "-std=c++17", "-O3", *target, *(f"-D{d}" for d in defines), "-shared",
           "-Xcompiler", "-fPIC", "-I", expert_dir,
           f'-DCUBRIDGE_BWD_KERNEL="{kernel_path}"', os.path.join(HERE, "shim.cu"), "-o", lib]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stdout + r.stderr)
        sys.exit(1)
    so = ctypes.CDLL(lib)
    so.bwd_check_workspace.restype = ctypes.c_size_t
    so.bwd_check_workspace.argtypes = [ctypes.c_int] * 7
    so.bwd_check_run.restype = ctypes.c_int
    so.bwd_check_run.argtypes = ([ctypes.c_void_p] * 10 + [ctypes.c_size_t] + [ctypes.c_int] * 7 +
                                 [ctypes.c_float, ctypes.c_int, ctypes.c_void_p])
    return so


def reference(torch, q, k, v, grad_o, scale):
    """O, LSE and dQ, dK, dV of softmax(Q K^T * scale) V in float64, GQA by repeating K and V."""
    group = q.shape[1] // k.shape[1]
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    kr, vr = k64.repeat_interleave(group, 1), v64.repeat_interleave(group, 1)
    s = torch.matmul(q64, kr.transpose(-1, -2)) * scale
    lse = torch.logsumexp(s, -1)
    o = torch.matmul(torch.softmax(s, -1), vr)
    dq, dk, dv = torch.autograd.grad(o, (q64, k64, v64), grad_o.double())
    return o.detach(), lse.detach(), dq, dk, dv


def run_kernel(torch, so, q, k, v, o, lse, grad_o, scale, dtype_code, det=0):
    """det: 1 for the deterministic mode (64-bit fixed-point sums)."""
    b, hq, sq, d = q.shape
    hkv, skv = k.shape[1], k.shape[2]
    grads = [torch.full_like(t, float("nan")) for t in (q, k, v)]
    ws = torch.empty(so.bwd_check_workspace(b, hq, hkv, d, sq, skv, det), dtype=torch.uint8,
                     device=q.device)
    args = [t.data_ptr() for t in (q, k, v, o, lse, grad_o, *grads, ws)]
    stream = torch.cuda.current_stream().cuda_stream
    err = so.bwd_check_run(*args, ws.numel(), b, hq, hkv, d, sq, skv, dtype_code, scale, det,
                           stream)
    return err, grads, (args, ws)


def compare(torch, got, want, dtype_name, floor):
    """floor: the least scale, a thousandth of the largest of the three gradients, so that a
    gradient that is 0 (one key: dS = P (dP - D) = 0) meets fp32 rounding with a tolerance."""
    atol_rel, rtol = TOLERANCE[dtype_name]
    got, want = got.double(), want.double()
    scale = max(want.abs().max().item(), floor)
    diff = (got - want).abs()
    diff = torch.where(torch.isnan(diff), torch.full_like(diff, float("inf")), diff)
    bad = diff > atol_rel * scale + rtol * want.abs()
    return {"max_abs": diff.max().item(), "max_abs_want": scale,
            "rel": diff.max().item() / scale if scale > 0 else diff.max().item(),
            "violations": int(bad.sum().item()), "unwritten": int(torch.isnan(got).sum().item())}


def check(torch, so, cases, seed):
    results, ok = [], True
    gen = torch.Generator(device="cuda").manual_seed(seed)
    for (b, hq, hkv, d, sq, skv, name) in cases:
        dt = torch.bfloat16 if name == "bf16" else torch.float16
        q = torch.randn(b, hq, sq, d, device="cuda", generator=gen).to(dt)
        k = torch.randn(b, hkv, skv, d, device="cuda", generator=gen).to(dt)
        v = torch.randn(b, hkv, skv, d, device="cuda", generator=gen).to(dt)
        grad_o = torch.randn(b, hq, sq, d, device="cuda", generator=gen).to(dt)
        scale = d ** -0.5
        o, lse, dq, dk, dv = reference(torch, q, k, v, grad_o, scale)
        inputs = (q, k, v, o.to(dt).contiguous(), lse.float().contiguous(), grad_o, scale,
                  0 if name == "bf16" else 1)
        case = {"shape": [b, hq, hkv, d, sq, skv], "dtype": name}
        floor = 1e-3 * max(w.abs().max().item() for w in (dq, dk, dv))
        # The fast mode, then the deterministic one twice: both against float64 autograd, and
        # the deterministic runs bit for bit alike.
        det_runs = []
        for mode, det in (("", 0), ("det_", 1), ("det2_", 1)):
            err, got, _ = run_kernel(torch, so, *inputs, det=det)
            torch.cuda.synchronize()
            case[mode + "launch"] = err
            if err != 0:
                ok = False
                continue
            if det:
                det_runs.append(got)
            for label, g, w in zip(("dq", "dk", "dv"), got, (dq, dk, dv)):
                case[mode + label] = compare(torch, g, w, name, floor)
                ok &= case[mode + label]["violations"] == 0 and case[mode + label]["unwritten"] == 0
        if len(det_runs) == 2:
            case["det_bitwise"] = all(torch.equal(x, y) for x, y in zip(*det_runs))
            ok &= case["det_bitwise"]
        results.append(case)
        print(json.dumps(case))
    return ok, results


def bench_problem(torch, d, s=8192):
    """The issue's shape: bf16, Llama2-7B heads (32) at d 128 (16 at d 256), B * S = 16k tokens,
    S = 8k (or s); full. Its Q, K, V and dO, the scale, and the backward's FLOPs."""
    b, h = max(1, 16384 // s), 32 * 128 // d
    q, k, v, grad_o = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
                       for _ in range(4))
    return q, k, v, grad_o, d ** -0.5, 2.5 * 4.0 * b * h * s * s * d


def forward_of(torch, q, k, v, scale):
    """The forward's O and LSE, which the kernel reads: SDPA's math-free reference is too slow at
    the bench's size, so they come from a float32 pass (their accuracy does not change the
    timing)."""
    import torch.nn.functional as F
    b, h, s, _ = q.shape
    with torch.no_grad():
        o = F.scaled_dot_product_attention(q, k, v, scale=scale)
        lse = torch.empty(b, h, s, device="cuda", dtype=torch.float32)
        for i in range(0, s, 1024):
            lse[:, :, i:i + 1024] = torch.logsumexp(
                torch.matmul(q[:, :, i:i + 1024].float(), k.float().transpose(-1, -2)) * scale, -1)
    return o, lse


def bench(torch, so, reps, d=128, profile=False, no_flex=False, s=8192):
    """bench_problem's backward by the kernel, SDPA and Flex. profile: the kernel once and
    nothing else (under ncu)."""
    import torch.nn.functional as F
    q, k, v, grad_o, scale, flops = bench_problem(torch, d, s)
    b, h, s, _ = q.shape

    def timed(fn):
        fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(reps):
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        times.sort()
        t = times[len(times) // 2]
        return {"seconds": t, "tflops": flops / t / 1e12}

    out = {"shape": [b, h, s, d], "dtype": "bf16", "mask": "full", "head_dim": d}
    if profile:
        lse = torch.zeros(b, h, s, device="cuda", dtype=torch.float32)
        err = run_kernel(torch, so, q, k, v, q, lse, grad_o, scale, 0)[0]
        torch.cuda.synchronize()
        return dict(out, launch=err)
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    o_sdpa = F.scaled_dot_product_attention(qg, kg, vg, scale=scale)
    out["sdpa"] = timed(lambda: torch.autograd.grad(o_sdpa, (qg, kg, vg), grad_o,
                                                    retain_graph=True))
    try:
        if no_flex:
            raise RuntimeError("not run (--no-flex)")
        from torch.nn.attention.flex_attention import flex_attention
        flex = torch.compile(flex_attention)
        o_flex = flex(qg, kg, vg, scale=scale)
        out["flex"] = timed(lambda: torch.autograd.grad(o_flex, (qg, kg, vg), grad_o,
                                                        retain_graph=True))
    except Exception as e:  # noqa: BLE001 - recorded, not fatal
        out["flex"] = {"error": str(e)[:200]}
    o, lse = forward_of(torch, q, k, v, scale)
    state = {}

    def run():
        state["r"] = run_kernel(torch, so, q, k, v, o, lse, grad_o, scale, 0)

    out["cubridge"] = timed(run)
    out["cubridge"]["launch"] = state["r"][0]

    def run_det():
        state["d"] = run_kernel(torch, so, q, k, v, o, lse, grad_o, scale, 0, det=1)

    # Issue 30: the deterministic mode within 15% of the fast one.
    out["cubridge_det"] = timed(run_det)
    out["cubridge_det"]["launch"] = state["d"][0]
    # Each of the backward's kernels (pre- and postprocess beside the attention), by one run
    # under torch.profiler: what a fixed cost weighs against the main kernel.
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    kernels = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            kernels[e.name[:80]] = kernels.get(e.name[:80], 0.0) + e.device_time_total / 1e3
    out["cubridge"]["kernels_ms"] = kernels
    print(json.dumps(out))
    return out


def compare_bench(torch, sos, reps, d=128, s=8192):
    """The kernels of one tile built with different macros (sos: {name: library}, the first the
    baseline), timed in one process on the same inputs, their calls interleaved rep by rep: the
    spread between processes (4% in session 23) hides a 2-3% lever, the paired ratios do not.
    Fast and deterministic mode, kernel alone with pre- and postprocess, at bench_problem."""
    q, k, v, grad_o, scale, flops = bench_problem(torch, d, s)
    o, lse = forward_of(torch, q, k, v, scale)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = {(name, det): [] for name in sos for det in (0, 1)}
    names = list(sos)
    for so in sos.values():  # each library's first call (module load) outside the timing
        for det in (0, 1):
            run_kernel(torch, so, q, k, v, o, lse, grad_o, scale, 0, det=det)
    torch.cuda.synchronize()
    for r in range(reps):
        for det in (0, 1):
            for i in range(len(names)):
                name = names[(r + i) % len(names)]  # each rep another order
                start.record()
                run_kernel(torch, sos[name], q, k, v, o, lse, grad_o, scale, 0, det=det)
                end.record()
                torch.cuda.synchronize()
                times[(name, det)].append(start.elapsed_time(end))

    def median(xs):
        return sorted(xs)[len(xs) // 2]
    out = {"shape": list(q.shape), "reps": reps, "variants": {}}
    for name in names:
        row = {}
        for det, mode in ((0, "fast"), (1, "deterministic")):
            ts = times[(name, det)]
            base = times[(names[0], det)]
            row[mode] = {"ms": median(ts), "tflops": flops / median(ts) / 1e9,
                         "over_baseline": median([t / t0 for t, t0 in zip(ts, base)])}
        row["deterministic_over_fast"] = median(
            [t1 / t0 for t0, t1 in zip(times[(name, 0)], times[(name, 1)])])
        out["variants"][name] = row
    print(json.dumps(out))
    return out


def trace_bench(torch, so, d=128, s=8192):
    """Where a CTA's time goes (fa3_sm90 built with CUBRIDGE_BWD_TRACE, trace_bwd.cuh): one
    fast-mode call at bench_problem after a warm-up, its CTAs' phase stamps (SM clock) read
    back. Per CTA, medians in microseconds: K/V landed after entry, the first block's stage after
    K/V, a block of the walk, dK/dV's store, the rest (dQ's conversion, exit); per SM, the share
    of the kernel's span some CTA was running and the gap from one CTA's end to the next's
    start; the SM clock's rate from the busiest SM's clock and global-timer spans; the kernel's
    span (first CTA's start to last one's end) and the part after the last CTA started."""
    slots, ctas = 10, 1 << 16  # trace_bwd.cuh's kTraceSlots, kTraceCtas
    so.bwd_check_trace.restype = ctypes.c_int
    so.bwd_check_trace.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    q, k, v, grad_o, scale, _ = bench_problem(torch, d, s)
    o, lse = forward_of(torch, q, k, v, scale)
    host = torch.zeros(ctas * slots, dtype=torch.int64)
    run_kernel(torch, so, q, k, v, o, lse, grad_o, scale, 0)
    torch.cuda.synchronize()
    so.bwd_check_trace(host.data_ptr(), host.numel())  # clears the warm-up's stamps
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    err = run_kernel(torch, so, q, k, v, o, lse, grad_o, scale, 0)[0]
    end.record()
    torch.cuda.synchronize()
    ms = start.elapsed_time(end)
    if err or so.bwd_check_trace(host.data_ptr(), host.numel()):
        return {"error": f"launch {err} or trace read failed"}
    rows = [r for r in host.view(ctas, slots).tolist() if r[5] > 0]  # kTraceEnd stamped
    by_sm = {}
    for r in rows:
        by_sm.setdefault(r[6], []).append(r)
    busiest = max(by_sm.values(), key=len)
    ghz = ((max(r[5] for r in busiest) - min(r[0] for r in busiest)) /
           (max(r[9] for r in busiest) - min(r[8] for r in busiest)))
    first_ns, last_start_ns, last_ns = (min(r[8] for r in rows), max(r[8] for r in rows),
                                        max(r[9] for r in rows))

    def median(xs):
        xs = sorted(xs)
        return xs[len(xs) // 2] if xs else 0

    def med(cycles):  # in microseconds
        return round(median(cycles) / (ghz * 1e3), 3)
    gaps, busy = [], []
    for sm_rows in by_sm.values():
        sm_rows.sort()
        gaps += [b[0] - a[5] for a, b in zip(sm_rows, sm_rows[1:])]
        span = max(r[5] for r in sm_rows) - min(r[0] for r in sm_rows)
        busy.append(sum(r[5] - r[0] for r in sm_rows) / span if span else 0.0)
    out = {"shape": list(q.shape), "ms_with_pre_post": ms, "ctas": len(rows), "sms": len(by_sm),
           "kernel_span_ms": (last_ns - first_ns) / 1e6,
           "tail_ms": (last_ns - last_start_ns) / 1e6,
           "clock_ghz": round(ghz, 3), "blocks_per_cta": median([r[7] for r in rows]),
           "us": {"cta": med([r[5] - r[0] for r in rows]),
                  "kv_landed": med([r[1] - r[0] for r in rows]),
                  "first_block_landed": med([r[2] - r[1] for r in rows]),
                  "per_block": med([(r[3] - r[2]) / max(r[7], 1) for r in rows]),
                  "store_dk_dv": med([r[4] - r[3] for r in rows]),
                  "after_store": med([r[5] - r[4] for r in rows]),
                  "gap_between_ctas": med(gaps)},
           "sm_busy": round(median(busy), 4)}
    print(json.dumps(out))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--no-flex", action="store_true",
                    help="--bench without FlexAttention (its compile is most of a quick A/B's time)")
    ap.add_argument("--seed", type=int, default=20261129)
    ap.add_argument("--seqlen", default="8192",
                    help="--bench's and --compare's sequence lengths, e.g. 8192,1024 (B * S = 16k)")
    ap.add_argument("--expert", choices=sorted(BACKWARD_TILES), default="fa2_sm80")
    ap.add_argument("--define", action="append", default=[], metavar="NAME=VALUE",
                    help="a macro for nvcc (an A/B of a kernel's compile-time switch)")
    ap.add_argument("--tiles", help="only these tiles, e.g. 64x128 (default: every tile)")
    ap.add_argument("--profile", action="store_true",
                    help="no checks: each tile's kernel once at the bench shape (for ncu)")
    ap.add_argument("--compare", action="append", default=[], metavar="'NAME=VALUE ...'",
                    help="also the kernel with these macros (beside --define's), checked as the "
                         "baseline is, and timed against it in this process, interleaved "
                         "(--reps pairs; one tile: --tiles)")
    ap.add_argument("--compare-head-dims", default="",
                    help="--compare's head dims, e.g. 64,128 (default: the tile's largest; a "
                         "switch for one head dim, such as CUBRIDGE_BWD_SUM_DQ at 64)")
    ap.add_argument("--trace", action="store_true",
                    help="fa3_sm90: also each tile (and each --compare set) built with "
                         "CUBRIDGE_BWD_TRACE, its CTAs' phases at each --seqlen (trace_bwd.cuh)")
    a = ap.parse_args()
    seqlens = [int(x) for x in a.seqlen.split(",")]
    try:
        import torch
    except ImportError:
        skip("no torch")
    if not torch.cuda.is_available():
        skip("no GPU")
    major, minor = torch.cuda.get_device_capability()
    if a.expert == "fa3_sm90" and major != 9:
        skip("fa3_sm90 needs an sm_90 GPU")
    tmp = tempfile.mkdtemp(prefix="cubridge-bwd-")
    cases = [
        (1, 2, 2, 64, 70, 45, "bf16"), (2, 4, 2, 128, 33, 100, "fp16"),
        (1, 3, 1, 128, 257, 300, "bf16"), (2, 8, 8, 64, 130, 130, "fp16"),
        (1, 4, 4, 128, 300, 257, "fp16"), (1, 2, 2, 128, 1000, 1000, "bf16"),
        (1, 1, 1, 64, 1, 1, "bf16"), (2, 6, 2, 64, 511, 129, "bf16"),
        (1, 1, 1, 128, 1, 1, "fp16"), (2, 6, 2, 128, 511, 129, "bf16"),
        (1, 2, 2, 256, 70, 45, "bf16"), (2, 4, 2, 256, 33, 100, "fp16"),
        (1, 3, 1, 256, 257, 300, "bf16"), (1, 4, 4, 256, 300, 257, "fp16"),
        (1, 1, 1, 256, 1, 1, "bf16"), (2, 6, 2, 256, 511, 129, "bf16"),
    ]
    ok, results, benches, compared, traces = True, [], [], [], []
    for tile, head_dims in BACKWARD_TILES[a.expert]:
        if a.tiles and f"{tile[0]}x{tile[1]}" not in a.tiles.split(","):
            continue
        so = build(tmp, f"sm_{major}{minor}", a.expert, tile, a.define)
        if a.profile:
            print(json.dumps(bench(torch, so, 1, max(head_dims), profile=True)))
            continue
        tile_ok, tile_results = check(torch, so, [c for c in cases if c[3] in head_dims], a.seed)
        ok &= tile_ok
        results += [dict(r, tile=list(tile)) for r in tile_results]
        if a.compare:
            sos = {"baseline": so}
            for extra in a.compare:
                defines = a.define + extra.replace(",", " ").split()
                sos[extra] = build(tmp, f"sm_{major}{minor}", a.expert, tile, defines)
                extra_ok, extra_results = check(
                    torch, sos[extra], [c for c in cases if c[3] in head_dims], a.seed)
                ok &= extra_ok
                results += [dict(r, tile=list(tile), defines=defines) for r in extra_results]
            dims = ([int(x) for x in a.compare_head_dims.split(",") if int(x) in head_dims]
                    if a.compare_head_dims else [max(head_dims)])
            for d in dims:
                for s in seqlens:
                    compared.append(dict(compare_bench(torch, sos, a.reps, d, s),
                                         tile=list(tile)))
        if a.trace and a.expert == "fa3_sm90":
            for extra in [""] + a.compare:
                defines = a.define + extra.replace(",", " ").split() + ["CUBRIDGE_BWD_TRACE=1"]
                traced = build(tmp, f"sm_{major}{minor}", a.expert, tile, defines)
                for s in seqlens:
                    traces.append(dict(trace_bench(torch, traced, max(head_dims), s),
                                       tile=list(tile), defines=defines))
        if a.bench:
            for s in seqlens:
                benches.append(dict(bench(torch, so, a.reps, max(head_dims), no_flex=a.no_flex,
                                          s=s), tile=list(tile)))
    report = {"device": torch.cuda.get_device_name(), "expert": a.expert, "defines": a.define,
              "passed": ok,
              "cases": results}
    if a.bench:
        # "bench": the d 128 row (the issue's), "benches": every tile's.
        report["bench"], report["benches"] = benches[0], benches
    if compared:
        report["compare"] = compared
    if traces:
        report["trace"] = traces
    if a.out:
        with open(a.out, "w") as f:
            json.dump(report, f, indent=1)
    print("PASSED" if ok else "FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
