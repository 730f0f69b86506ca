"""Benchmark matrix of issue 3 (item 7): lowered CuBridge kernels against FlexAttention, SDPA and
eager PyTorch, in one process on one GPU.

Here (CPU):     bash bench/make_kernels.sh DIR
On the GPU:     python3 bench/run_matrix.py DIR [--out docs/benchmarks.md] [--only REGEX]
                    [--seqlens 1024,8192] [--heads llama2-7b,qwen2.5-72b,llama3.1-405b]
                    [--extra-hdims 64,256] [--budget-s SECONDS]
Merge parts:    python3 bench/run_matrix.py --merge A.json B.json [--out docs/benchmarks.md]
A/B:            python3 bench/run_matrix.py DIR --against DIR2 [--rounds 5] ...
Tile candidates: python3 bench/run_matrix.py DIR --candidate DIR2 [DIR3 ...] ...

Cases: every variant of examples/specs x S in --seqlens (batch = 16384 // S) x head configs
Llama2-7B (32/32), Qwen2.5-72B (64/8), Llama3.1-405B (128/8), bf16, head dim 128; plus causal at
head dims --extra-hdims with Llama2-7B heads (only when llama2-7b is among --heads). DIR holds
NAME_sm_90.cu from make_kernels.sh (prefix_lm_1k / prefix_lm_8k: prefix = S / 4); all are built
with nvcc in parallel threads while the first FlexAttention compiles run (NAME.so next to them; an
existing NAME.so newer than its .cu is reused unless --rebuild).

Per case: FlexAttention's output first (compiled, dynamic=False; dynamo reset once per (head
config, variant), recompile limit raised to 64); our output must match it (launcher error, NaN,
or |O - O_flex| > 2e-2 + 1e-2 |O_flex| anywhere: the row is marked FAIL, the run goes on); then
do_bench (warmup 10 ms, rep 60 ms, median) for CuBridge (only the C launcher call: Params and
workspace prepared once outside the timing; block tables built once outside it too, through
cubridge_attn_fwd_tables, and timed on their own for the notes), Flex
(block mask built once outside), SDPA (cuDNN / flash / efficient, fastest kept; dense bool mask as
attn_mask for masked variants, is_causal for causal, nothing for score mods) and eager PyTorch
(materialised scores, bf16, fp32 after a score_mod; per-head chunks so an fp32 score chunk stays
<= 4 GiB; chunk loop and GQA K/V repeat inside the timing; not timed when one call takes > 0.5 s).
The reported CuBridge, Flex and SDPA times then come from one more timing of the three in
rotation (3 rounds, rep 60 ms, median of each; the first times stay in the JSON as *_ms_alone):
timed one after the other, a 15 ms call (405B heads, S=8k) got 3-4 samples per do_bench at
whatever clock the power limit left, and two timings of one kernel differed by up to 15%.

--reference eager (default flex: as above): the reference O is eager PyTorch in fp32, computed
first (per head chunk: QK^T, scale, score_mod, the mask_mod on broadcast b / h / q / kv index
tensors, softmax, PV; O = 0 on fully masked rows, as the kernels give), because FlexAttention does
not implement Python's negative indexing of captured tensors (`ids[-1]`, a negative table index):
in the generality suite one spec faults with an illegal memory access, which takes the CUDA context
with it, and two give a wrong O, against which a correct kernel was marked FAIL. CuBridge is then
checked and timed alone before Flex runs; Flex's O is checked by the same rule (row flex_status:
ok, wrong: ..., failed: ...), a wrong Flex is still timed but gets no CuBridge/Flex ratio, and the
final rotation runs only where Flex raised nothing. Not with --against or --candidate.

A/B mode (--against DIR2, two sets of kernels, e.g. HEAD's and a patch's): both are checked
against Flex, then timed in alternation, A B, B A, A B ... (--rounds pairs of do_bench, rep 20 ms;
the median of each), so that clock and temperature drift between runs falls on both alike (two
sequential runs of one kernel set differed by up to 10% per row on an H100). Eager is not run;
the row gets b_ms / b_tflops / b_status and b_over_a, and a summary table closes the log.

Candidate mode (--candidate DIR2 [DIR3 ...], the same variants lowered at other tiles:
make_kernels.sh with CUBRIDGE_TILE): what the service's autotuner does for a shape class, per row,
among the sets whose tile it would try at the row's head dim (SM90_TILES; the first set always).
Every kernel is checked against Flex and all are timed in rotation (2 rounds, rep 20 ms); the
fastest is then timed as in the plain matrix (alone, then in the final rotation), so the reported
time is not the selection's own (a max over noisy rounds would lean high). Any failing kernel
fails the row. The CuBridge cell names the pick's tile (n128, n176, n80, n128s2: BLOCK_N, and the K/V
stages where not the expert's default 3); everything else is as in the plain matrix.

Progress goes to stdout (flushed) with elapsed times; with $OUT set, $OUT/matrix_rows.json and
$OUT/benchmarks_section.md are rewritten after every case, so a run cut short still leaves its rows.
Merge mode (no GPU, no torch) renders one section from the JSON files of several partial runs.
"""
import argparse
import contextlib
import ctypes
import functools
import importlib.util
import json
import math
import os
import re
import shlex
import statistics
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

import suite as suites  # noqa: E402  (bench/suite.py, beside this file)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
VARIANTS = ("full", "causal", "sliding_window", "global_sliding_window", "prefix_lm", "block_causal",
            "causal_document", "share_question", "relative_position", "alibi", "softcap",
            "alibi_window_softcap")
HEADS = {  # key: (label, heads_q, heads_kv)
    "llama2-7b": ("Llama2-7B", 32, 32),
    "qwen2.5-72b": ("Qwen2.5-72B", 64, 8),
    "llama3.1-405b": ("Llama3.1-405B", 128, 8),
}
SUITE = None  # a suites.Suite with --suite: its variants replace the twelve examples
ARCH = "sm_90"  # --arch: the kernel files NAME_<ARCH>.cu and the nvcc target
TOKENS = 16384          # batch = TOKENS // S
HEAD_DIM = 128
ATOL, RTOL = 2e-2, 1e-2  # bf16 O: two bf16 roundings of |O| ~ 4 already differ by 1.6e-2
EAGER_SCORE_BYTES = 4 << 30
EAGER_MAX_CALL_S = 0.5
WARMUP_MS, REP_MS, EAGER_REP_MS = 10, 60, 30
AB_REP_MS = 20
FINAL_ROUNDS = 3
# The Hopper autotuner's candidates per head dim (worker/gpu/autotune.cc, CandidateTiles), as
# tile_label names them: in candidate mode a row plays only the sets whose tile the service would
# try at its head dim (the first set, DIR, always).
SM90_TILES = {64: {"n128", "n176", "n64"}, 128: {"n128", "n176", "n128s2", "n64"},
              256: {"n80", "n128", "n64"}}


@functools.lru_cache(maxsize=None)  # candidate mode asks per row and per set; the file is fixed
def tile_label(folder, kname):
    """The tile a lowered kernel was built for (its tile_params region): n<BLOCK_N>, plus
    s<STAGES> where the stages are not the Hopper expert's default 3."""
    with open(os.path.join(folder, f"{kname}_{ARCH}.cu")) as f:
        text = f.read()
    bn = re.search(r"^constexpr int BLOCK_N = (\d+);", text, re.M)
    st = re.search(r"^constexpr int STAGES = (\d+);", text, re.M)
    label = f"n{bn.group(1)}" if bn else "n?"
    return label + (f"s{st.group(1)}" if st and st.group(1) != "3" else "")


@functools.lru_cache(maxsize=None)
def has_tables(folder, kname):
    """Whether the lowered kernel builds block tables (its table_kernel region is generated)."""
    with open(os.path.join(folder, f"{kname}_{ARCH}.cu")) as f:
        for line in f:
            if line.startswith("// Generated regions:"):
                return "table_kernel" in line.split(";")[0]
    return False


def kernel_and_params(name, s):
    """Kernel file stem and the spec params baked into it (and passed to the Flex mask)."""
    if SUITE:
        return name, SUITE.params(name)
    if name == "prefix_lm":
        return f"prefix_lm_{s // 1024}k", {"prefix": s // 4}
    return name, {}


def variant_label(name, s):
    if SUITE:
        return SUITE.label(name)
    extra = {"sliding_window": "W=256", "global_sliding_window": "W=256, G=64",
             "prefix_lm": f"P={s // 4}", "block_causal": "block 128",
             "relative_position": "0.01 (q-kv)", "alibi": "32-head slopes", "softcap": "cap 20",
             "alibi_window_softcap": "W=256, 32-head slopes, cap 20"}.get(name)
    return f"{name} ({extra})" if extra else name


def fmt_s(s):
    return f"{s // 1024}k" if s % 1024 == 0 else str(s)


def fmt_tf(x):
    return "—" if x is None else f"{x:.1f}"


# ---------------------------------------------------------------------------------------------
# Rendering (no torch needed: also used by --merge)

def expert_of(folder):
    """The expert named in the first lowered kernel's header line."""
    for name in sorted(os.listdir(folder)):
        if name.endswith(f"_{ARCH}.cu"):
            with open(os.path.join(folder, name)) as f:
                m = re.search(r'\(expert "([A-Za-z0-9_]+)"\)', f.readline())
            return m.group(1) if m else "?"
    return "?"


def render_section(metas, rows):
    m0 = metas[0]
    planned = sum(m.get("planned", 0) for m in metas)
    gpu = m0.get("gpu", "?")
    suite = m0.get("suite")
    eager_ref = m0.get("reference") == "eager"  # merge() refuses files of different references
    o_ref = "O_ref" if eager_ref else "O_flex"
    arch = m0.get("arch", "sm_90")
    nvcc_target = "-gencode=arch=compute_90a,code=sm_90a" if arch == "sm_90" else f"-arch={arch}"
    what = f"the {suite} suite" if suite else "benchmark matrix"
    out = [f"## {m0.get('date', '?')} — {what}: lowered {m0.get('expert', '?')} expert vs FlexAttention / SDPA{'' if suite else ' / eager'}, {gpu}", ""]
    cmds = "; then ".join(f"`{m['command']}`" for m in metas)
    done = len(rows)
    partial = ""
    if done < planned:
        partial = f" **Partial: {done} of {planned} cases ran.**"
    env = "" if arch == "sm_90" else f"CUBRIDGE_ARCH={arch} "
    if suite:
        made = (f"`{env}CUBRIDGE_SUITE={suite} bash bench/make_kernels.sh DIR` here (CPU: each spec of "
                f"examples/specs/{suite}/suite.json lowered with `cubridge-cli adapt --local --arch {arch}` "
                "and its suite buffers and params, verified on the CPU against its oracle)")
    else:
        made = (f"`{env}bash bench/make_kernels.sh DIR` here (CPU: each spec lowered with `cubridge-cli adapt "
                f"--local --arch {arch}`, verified on the CPU against its oracle; prefix_lm twice, prefix 256 for "
                "S=1k and 2048 for S=8k; all other params at their spec defaults)")
    out.append(
        f"Command: {made}, then on the device machine "
        f"(repository root): {cmds}.{partial} "
        f"PyTorch {m0.get('torch', '?')} (CUDA {m0.get('cuda', '?')}), Triton {m0.get('triton', '?')}, {gpu}.")
    out.append("")
    units = ("- Units: TFLOP/s on kept elements, 4 · B · Hq · kept · D / time; kept is counted from the "
             "variant's mask_mod evaluated densely at b = h = 0 (all twelve example masks ignore b and h; "
             "the script assumes it, it does not check it); density = kept / (Sq · Skv). bf16, batch = "
             "16384 / S, Sq = Skv = S.")
    if suite:
        units = ("- Units: TFLOP/s on kept elements, 4 · D · (kept summed over b, h) / time; a mask "
                 "that reads b or h (its bytecode loads them) is evaluated densely for every (b, h), "
                 "any other at b = h = 0; density = kept / (B · Hq · Sq · Skv). bf16, batch = 16384 / S, "
                 "Sq = Skv = S. Captured tensors are built at the row's shape from the suite's sources "
                 "(bench/suite.py: floats N(0, 1), bools fair coins, ints uniform in [0, S], seed 1234), "
                 "the same tensors for CuBridge, Flex and the reference, outside the timing; Flex's block "
                 "mask is built per (b, h) (`_compile=True`) for masks that read b or h. SDPA only for masks "
                 "alone that ignore b and h; "
                 + ("eager only as the reference, not timed." if eager_ref else "no eager."))
    out += ["Method:", units]
    if eager_ref:
        out.append(
            "- Reference: eager PyTorch in fp32, not Flex (Flex does not implement Python's negative "
            "indexing of captured tensors: in the generality suite one spec faults with an illegal "
            "memory access, two give a wrong O). Per head chunk (fp32 score chunk ≤ 4 GiB): QK^T of the "
            "bf16 inputs in fp32, times the scale, the score_mod, the mask_mod evaluated on broadcast "
            "index tensors (b [B,1,1,1], the chunk's h [hc,1,1], q [S,1], kv [1,S]), softmax and PV in "
            "fp32; O = 0 on a fully masked row, as the kernels give. Per row the reference runs "
            "first, then CuBridge is checked and timed alone, then Flex runs and its O is checked by "
            "CuBridge's rule: a wrong Flex keeps its time, marked (wrong), a failed one has none, and "
            "neither gets a CuBridge/Flex ratio; the rotation below runs only where Flex raised nothing.")
    out += [
        f"- CuBridge: the lowered kernel (expert {m0.get('expert', '?')}, built with `nvcc -O3 "
        f"{nvcc_target}`) "
        "through its C launcher (ctypes); Params and workspace prepared once, the timed call is the "
        "launcher alone. Kernels with block tables (masks no analytic KV range covers) build them once outside the "
        "timing (`cubridge_attn_fwd_tables`, as Flex's block mask) and the timed call is "
        "`cubridge_attn_fwd_attention`; the notes give each table build's own time. Before "
        f"timing, its O is compared with {'the reference' if eager_ref else 'FlexAttention'}'s: "
        "FAIL when the launcher returns an error, O "
        f"has a NaN, or |ΔO| > 2e-2 + 1e-2 · |{o_ref}| anywhere.",
        "- Flex: `torch.compile(flex_attention, dynamic=False)`, dynamo reset once per (head config, "
        "variant), block mask (`create_block_mask`, B = H = None) built once outside the timing, "
        "`enable_gqa=True` for GQA.",
        "- SDPA: cuDNN, flash and efficient each tried alone (`sdpa_kernel`), fastest kept; "
        "`is_causal=True` for causal, the dense bool mask as `attn_mask` for the other masked "
        "variants (built outside the timing), `enable_gqa=True` for GQA (K/V repeated outside the "
        "timing where a backend refuses it: 'kv rep.'); — for score mods (no SDPA form).",
        "- eager: PyTorch ops on materialised scores (Q pre-scaled, QK^T in bf16; for score mods "
        "the score_mod and softmax in fp32; masked_fill with the dense mask, softmax, PV in bf16), "
        "heads in chunks so the fp32 score chunk stays "
        "≤ 4 GiB, GQA K/V gathered per chunk; the chunk loop and the K/V repeat are timed. Not timed "
        "(—) when one call takes more than 0.5 s.",
        "- Timing: `triton.testing.do_bench(warmup=10, rep=60, return_mode=\"median\")`; eager: "
        "rep=30, or the median of 3 CUDA-event-timed calls when one call takes over 50 ms.",
    ]
    if any(r.get("cubridge_ms_alone") for r in rows):
        out.append(
            f"- Reported times: CuBridge, Flex and SDPA's fastest backend timed once more in rotation "
            f"({FINAL_ROUNDS} rounds of the do_bench above, median of each), so that the power "
            "limit's clock swings fall on all three alike; the first times, taken one after the "
            "other, stay in the JSON as *_ms_alone.")
    tiles = sorted({t for r in rows for t in r.get("candidate_ms", {})})
    if tiles:
        out.append(
            f"- Tiles: every variant lowered at {len(tiles)} tiles ({', '.join(tiles)}: BLOCK_N, and "
            "K/V stages where not 3); per row every kernel is checked against Flex, all are timed "
            "in rotation (2 rounds, rep 20 ms), and the fastest, the one the service's autotuner "
            "would keep for that shape class, is timed as above. The CuBridge cell names it.")
    out.append("")
    groups = []
    for key, (label, hq, hkv) in HEADS.items():
        sel = [r for r in rows if r["group"] == key]
        if sel:
            groups.append((f"### {label} heads (Hq={hq}, Hkv={hkv}), head dim {HEAD_DIM}", sel, False))
    sel = [r for r in rows if r["group"] == "hdim"]
    if sel:
        groups.append(("### causal at other head dims, Llama2-7B heads (Hq=32, Hkv=32)", sel, True))
    for title, sel, with_d in groups:
        out += [title, ""]
        if with_d:
            out += ["| variant | head dim | S | density | CuBridge | Flex | SDPA (backend) | eager | CuBridge/Flex | CuBridge/SDPA |",
                    "|---|---|---|---|---|---|---|---|---|---|"]
        else:
            out += ["| variant | S | density | CuBridge | Flex | SDPA (backend) | eager | CuBridge/Flex | CuBridge/SDPA |",
                    "|---|---|---|---|---|---|---|---|---|"]
        for r in sel:
            ok = r.get("status") == "ok"
            c = r.get("cubridge_tflops")
            if ok:
                tile = r.get("tile") or (f"n{r['tile_block_n']}" if r.get("tile_block_n") else "")
                ccell = fmt_tf(c) + (f" ({tile})" if tile else "")
            elif str(r.get("status", "")).startswith("unchecked") and c:
                ccell = f"{c:.1f} (unchecked)"
            else:
                ccell = "FAIL" + (f" ({c:.1f})" if c else "")
            f = r.get("flex_tflops")
            s = r.get("sdpa_tflops")
            scell = f"{s:.1f} ({r.get('sdpa_backend')})" if s else "—"
            fst = r.get("flex_status", "ok")  # set with the eager reference only
            rf = f"{c / f:.2f}×" if ok and c and f else "—"
            if fst != "ok":  # no ratio to a wrong or absent output
                rf = "— (Flex failed)" if fst.startswith("failed") else "— (Flex wrong)"
            rs = f"{c / s:.2f}×" if ok and c and s else "—"
            cells = [r["label"]] + ([str(r["head_dim"])] if with_d else []) + [
                fmt_s(r["S"]), f"{r['density']:.3f}" if r.get("density") is not None else "—",
                ccell, fmt_tf(f) + (" (wrong)" if f and fst.startswith("wrong") else ""), scell,
                fmt_tf(r.get("eager_tflops")), rf, rs]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    notes = []
    diffs = [r for r in rows if r.get("max_abs_diff") is not None]
    if diffs:
        worst = max(diffs, key=lambda r: r["max_abs_diff"])
        notes.append(f"- max |O − {o_ref}| over all checked rows: {worst['max_abs_diff']:.2e} "
                     f"({worst['variant']}, S={fmt_s(worst['S'])}, {worst['heads_q']}/{worst['heads_kv']} heads, "
                     f"head dim {worst['head_dim']}).")
    for r in rows:
        where = f"{r['variant']} S={fmt_s(r['S'])} {r['heads_q']}/{r['heads_kv']} d{r['head_dim']}"
        picked = r.get("picked", "a")
        tables = r.get("tables_ms") if picked == "a" else r.get(f"{picked}_tables_ms")
        if tables and r.get("cubridge_ms"):
            notes.append(f"- block tables {where}: {tables * 1e3:.1f} us per build, "
                         f"{100 * tables / r['cubridge_ms']:.1f}% of the attention call (not in its time)")
        if r.get("status") != "ok":
            notes.append(f"- CuBridge {where}: {r.get('status')}")
        if str(r.get("flex_status", "")).startswith("wrong"):
            notes.append(f"- flex {where}: {r['flex_status']}")
        for key in ("reference_error", "flex_error", "sdpa_error", "eager_note"):
            if r.get(key):
                notes.append(f"- {key.split('_')[0]} {where}: {r[key]}")
        for key in ("sdpa_max_abs_diff", "eager_max_abs_diff"):
            if r.get(key) is not None and not r[key] <= 0.1:
                notes.append(f"- {key.split('_')[0]} {where}: its O differs from "
                             f"{'the reference' if eager_ref else 'Flex'}'s by {r[key]:.2e}")
    if notes:
        out += ["Notes:", ""] + notes + [""]
    return "\n".join(out)


def write_outputs(meta, rows):
    out_dir = os.environ.get("OUT")
    if not out_dir:
        return
    os.makedirs(out_dir, exist_ok=True)
    for fname, text in (("matrix_rows.json", json.dumps({"meta": meta, "rows": rows}, indent=1)),
                        ("benchmarks_section.md", render_section([meta], rows))):
        tmp = os.path.join(out_dir, fname + ".tmp")
        with open(tmp, "w") as fh:
            fh.write(text)
        os.replace(tmp, os.path.join(out_dir, fname))


def emit(section, out_path):
    print("\n" + section, flush=True)
    if out_path:
        with open(out_path, "a") as fh:
            fh.write("\n" + section)
        print(f"appended to {out_path}", flush=True)
    out_dir = os.environ.get("OUT")
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "benchmarks_section.md"), "w") as fh:
            fh.write(section)


def merge(files, out_path):
    metas, by_case = [], {}
    for path in files:
        with open(path) as fh:
            data = json.load(fh)
        metas.append(data["meta"])
        for r in data["rows"]:  # a case run again in a later file replaces the earlier row
            by_case[(r["group"], r["variant"], r["S"], r["heads_q"], r["heads_kv"], r["head_dim"])] = r
    if len({m.get("reference", "flex") for m in metas}) > 1:
        sys.exit("--merge: the files were checked against different references (--reference)")
    rows = list(by_case.values())
    suite = metas[0].get("suite") if metas else None
    names = suites.Suite(ROOT, suite).names if suite else VARIANTS
    order = {k: i for i, k in enumerate(names)}
    rows.sort(key=lambda r: (order.get(r["variant"], 99), r["head_dim"], r["S"]))
    emit(render_section(metas, rows), out_path)


# ---------------------------------------------------------------------------------------------
# GPU run

def short(e):
    text = f"{type(e).__name__}: {e}".replace("\n", " ").replace("|", "/")
    return text[:300]


_SPECS = {}


def load_spec(name):
    if name in _SPECS:  # one module object per spec: cached mask/score callables refer to it
        return _SPECS[name]
    path = SUITE.spec_path(name) if SUITE else os.path.join(ROOT, "examples", "specs", name + ".py")
    spec = importlib.util.spec_from_file_location("cubridge_spec_" + name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["cubridge_spec_" + name] = mod  # dynamo re-imports a traced function's module
    spec.loader.exec_module(mod)
    _SPECS[name] = mod
    return mod


def run(args):
    import warnings
    import torch
    import torch.nn.functional as F
    import triton
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    from triton.testing import do_bench

    warnings.filterwarnings("ignore", category=UserWarning)  # sdpa_kernel refusals are expected
    saved_argv = sys.argv
    sys.argv = [saved_argv[0], args.dir]  # check.py reads sys.argv at import
    sys.path.insert(0, os.path.join(HERE, "lowered"))
    try:
        import check  # noqa: E402  Params, build_from()
    finally:
        sys.argv = saved_argv

    for attr in ("cache_size_limit", "recompile_limit"):
        if hasattr(torch._dynamo.config, attr):
            try:
                setattr(torch._dynamo.config, attr, 64)
            except Exception:  # noqa: BLE001  an alias that cannot be set
                pass

    t_start = time.time()
    dev = "cuda"
    bf16 = torch.bfloat16
    meta = {
        "command": "python3 " + " ".join(shlex.quote(a) for a in sys.argv),
        "date": time.strftime("%Y-%m-%d"),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": triton.__version__,
        "finished": False,
        "expert": expert_of(args.dir),
        "arch": ARCH,
        "suite": args.suite,
        "reference": args.reference,
    }
    print(f"{meta['gpu']}  torch {meta['torch']}  cuda {meta['cuda']}  triton {meta['triton']}", flush=True)

    seqlens = [int(x) for x in args.seqlens.split(",") if x]
    head_keys = [x for x in args.heads.split(",") if x]
    for hk in head_keys:
        if hk not in HEADS:
            sys.exit(f"--heads: unknown '{hk}' (known: {', '.join(HEADS)})")
    extra_dims = [int(x) for x in args.extra_hdims.split(",") if x]
    names = [n for n in VARIANTS if re.search(args.only, n)] if args.only else list(VARIANTS)

    # Groups: (group key, variant, [(S, hq, hkv, d)]); one dynamo reset each.
    groups = []
    for hk in head_keys:
        _, hq, hkv = HEADS[hk]
        for name in names:
            groups.append((hk, name, [(s, hq, hkv, HEAD_DIM) for s in seqlens]))
        if hk == "llama2-7b" and "causal" in names and extra_dims:
            groups.append(("hdim", "causal", [(s, hq, hkv, d) for d in extra_dims for s in seqlens]))
    planned = sum(len(c) for _, _, c in groups)
    meta["planned"] = planned
    print(f"{planned} cases in {len(groups)} groups, reference {args.reference}", flush=True)

    # nvcc builds run in the background while the first Flex compiles run.
    kernels = []  # in order of first use, so the first groups wait least
    for _, n, cases in groups:
        for s, _, _, _ in cases:
            if kernel_and_params(n, s)[0] not in kernels:
                kernels.append(kernel_and_params(n, s)[0])
    pool = ThreadPoolExecutor(max(1, min(8, len(kernels))))

    def build(kname, folder=args.dir):
        src = os.path.join(folder, f"{kname}_{ARCH}.cu")
        so = os.path.join(folder, f"{kname}.so")
        if not os.path.exists(src):
            raise RuntimeError(f"no {src} (bench/make_kernels.sh writes it)")
        if not args.rebuild and os.path.exists(so) and os.path.getmtime(so) > os.path.getmtime(src):
            return so
        t0 = time.time()
        try:
            so = check.build_from(folder, kname, ARCH)
        except Exception as e:  # noqa: BLE001  print nvcc's whole message once
            print(f"  [{time.time() - t_start:6.1f}s] nvcc {kname} FAILED:\n{e}", flush=True)
            raise
        print(f"  [{time.time() - t_start:6.1f}s] nvcc {kname}: {time.time() - t0:.1f}s", flush=True)
        return so

    builds = {(k, args.dir): pool.submit(build, k) for k in kernels}
    # The other kernel sets and their row-key prefixes: B of an A/B, or the tile candidates.
    others = [args.against] if args.against else list(args.candidate or [])
    prefixes = [f"{chr(ord('b') + i)}_" for i in range(len(others))]
    for folder in others:
        builds.update({(k, folder): pool.submit(build, k, folder) for k in kernels})
    libs = {}

    def get_lib(kname, folder=args.dir):
        if (kname, folder) not in libs:
            libs[(kname, folder)] = check.load(builds[(kname, folder)].result())
        return libs[(kname, folder)]

    def bench(fn, rep=REP_MS):
        return do_bench(fn, warmup=WARMUP_MS, rep=rep, return_mode="median")

    docs = {}

    def documents(n):
        if n not in docs:
            docs[n] = check.bench_documents(n).to(dev)
        return docs[n]

    setups = {}

    def mask_facts(mask_mod, s, per_bh=None):
        """(dense S x S bool mask or None, kept per (b, h), Flex block mask) of a mask_mod (None:
        no mask). per_bh = (B, H): the mask reads b or h, so kept is the mean over every (b, h),
        there is no single dense mask, and the block mask is per (b, h)."""
        if mask_mod is None:
            return None, s * s, None
        qi = torch.arange(s, device=dev).view(-1, 1)
        ki = torch.arange(s, device=dev).view(1, -1)
        if per_bh is None:
            zero = torch.tensor(0, device=dev)
            dense = torch.broadcast_to(mask_mod(zero, zero, qi, ki), (s, s)).contiguous()
            return dense, int(dense.sum().item()), create_block_mask(mask_mod, None, None, s, s, device=dev)
        b_, hq = per_bh
        total = torch.zeros((), dtype=torch.int64, device=dev)
        for bb in range(b_):
            for hh in range(hq):
                m = mask_mod(torch.tensor(bb, device=dev), torch.tensor(hh, device=dev), qi, ki)
                total += torch.broadcast_to(m, (s, s)).sum()
        try:  # compiled: no B x H x S x S evaluation in memory
            block_mask = create_block_mask(mask_mod, b_, hq, s, s, device=dev, _compile=True)
        except TypeError:
            block_mask = create_block_mask(mask_mod, b_, hq, s, s, device=dev)
        return None, total.item() / (b_ * hq), block_mask  # mean: flops stay 4 B Hq kept D

    def suite_setup(name, mod, s, hq, hkv):
        """setup() for a suite variant: its captured tensors at this shape (a fixed seed, so every
        kernel set of a row sees the same values), bound into its mask / score functions as Flex
        gets them; kept counted over every (b, h) when the mask reads b or h."""
        kname, params = kernel_and_params(name, s)
        b_ = TOKENS // s
        slots, tensors = SUITE.bench_tensors(args.dir, kname, name, b_, hq, hkv, s, params, dev)
        raw_mask, raw_score = getattr(mod, "mask_mod", None), getattr(mod, "score_mod", None)
        mask_mod = suites.bound(raw_mask, 4, tensors, params)
        score_mod = suites.bound(raw_score, 5, tensors, params)
        per_bh = suites.reads_batch_or_head(raw_mask, 4)
        dense, kept, block_mask = mask_facts(mask_mod, s, (b_, hq) if per_bh else None)
        return dict(kname=kname, mask_mod=mask_mod, score_mod=score_mod, dense=dense,
                    neg=(~dense if dense is not None else None), kept=kept, block_mask=block_mask,
                    bufs=[tensors[n] for n, _, _ in slots], per_bh=per_bh,
                    # SDPA's bool attn_mask form: masks alone, the same for every (b, h)
                    sdpa=score_mod is None and dense is not None, eager_score=score_mod)

    def setup(name, mod, s, hq, hkv):
        """Mask / score callables, dense mask, kept count and block mask of (variant, S); cached."""
        key = (name, s, hq, hkv) if SUITE else (name, s)
        if key in setups:
            return setups[key]
        if SUITE:
            setups.clear()  # a suite row's tensors can be large (a full bias): one row's at a time
            setups[key] = suite_setup(name, mod, s, hq, hkv)
            return setups[key]
        kname, params = kernel_and_params(name, s)
        has_mask, has_score = hasattr(mod, "mask_mod"), hasattr(mod, "score_mod")
        uses_doc = has_mask and "doc" in mod.mask_mod.__code__.co_varnames
        kw = dict(params)
        if uses_doc:
            kw["doc"] = documents(s)
        mask_mod = (lambda b, h, q, kv: mod.mask_mod(b, h, q, kv, **kw)) if has_mask else None
        score_mod = (lambda sc, b, h, q, kv: mod.score_mod(sc, b, h, q, kv)) if has_score else None
        # Assumption: the mask ignores b and h (true of every example spec), so one S x S
        # evaluation gives kept for every (b, h).
        dense, kept, block_mask = mask_facts(mask_mod, s)
        st = dict(kname=kname, mask_mod=mask_mod, score_mod=score_mod, dense=dense,
                  neg=(~dense if dense is not None else None), kept=kept, block_mask=block_mask,
                  bufs=[kw["doc"]] if uses_doc else [],
                  # SDPA has a form for plain, causal and mask-only variants; full's score_mod
                  # is the identity.
                  sdpa=(name == "full") or not has_score,
                  eager_score=None if name == "full" else score_mod)
        setups[key] = st
        return st

    def make_params(lib, q, k, v, o, lse, scale, bufs):
        p, ws, _ = check.make_params(lib, q, k, v, o, lse, scale, bufs, 0)  # bufs already on the GPU
        return p, ws  # ws must stay alive while p is used

    def make_eager(q, k, v, scale, neg, score_mod, mask_mod=None, fp32=False):
        """Eager attention on materialised scores, heads in chunks: (call, heads per chunk). The
        timed one pre-scales Q and keeps QK^T, P and PV in bf16. fp32=True, the reference of
        --reference eager: every step in fp32, the mask from mask_mod per chunk where there is no
        dense one (a mask that reads b or h), and O = 0 on a fully masked row, as the kernels give
        it (softmax alone gives NaN there)."""
        b_, hq, s, _ = q.shape
        rep = hq // k.shape[1]
        hc = max(1, min(hq, EAGER_SCORE_BYTES // (b_ * s * s * 4)))
        chunks = []
        for h0 in range(0, hq, hc):
            h1 = min(h0 + hc, hq)
            chunks.append((h0, h1, None if rep == 1 else torch.arange(h0, h1, device=dev) // rep))
        bi = torch.arange(b_, device=dev).view(-1, 1, 1, 1)
        hi = torch.arange(hq, device=dev).view(-1, 1, 1)
        qi = torch.arange(s, device=dev).view(-1, 1)
        ki = torch.arange(s, device=dev).view(1, -1)
        out = torch.empty(q.shape, device=dev, dtype=torch.float32) if fp32 else torch.empty_like(q)

        def fn():
            for h0, h1, idx in chunks:
                if idx is None:
                    kc, vc = k[:, h0:h1], v[:, h0:h1]
                else:  # GQA: the K/V repeat is part of eager's work
                    kc, vc = k.index_select(1, idx), v.index_select(1, idx)
                if fp32:
                    sc = torch.matmul(q[:, h0:h1].float(), kc.float().transpose(-2, -1)).mul_(scale)
                else:
                    sc = torch.matmul(q[:, h0:h1] * scale, kc.transpose(-2, -1))
                if score_mod is not None:
                    # fp32 from here on: biases like ALiBi's reach hundreds, where bf16's spacing
                    # is 2 to 4 and would swamp QK^T.
                    sc = score_mod(sc.float(), bi, hi[h0:h1], qi, ki)
                if neg is not None:
                    sc.masked_fill_(neg, float("-inf"))
                elif mask_mod is not None:
                    sc.masked_fill_(~mask_mod(bi, hi[h0:h1], qi, ki), float("-inf"))
                if not fp32:
                    out[:, h0:h1] = torch.matmul(torch.softmax(sc, dim=-1).to(q.dtype), vc)
                    continue
                dead = sc.amax(dim=-1, keepdim=True) == float("-inf")
                sc = torch.softmax(sc, dim=-1).masked_fill_(dead, 0.0)
                out[:, h0:h1] = torch.matmul(sc, vc.float())
            return out
        return fn, hc

    def time_calls(fn, n=3):
        ts = []
        for _ in range(n):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            torch.cuda.synchronize()
            ts.append(a.elapsed_time(b))
        return statistics.median(ts)

    def tflops(flops, ms):
        return flops / (ms * 1e9) if ms else None

    def check_out(out, ref, what="|O - O_ref|"):
        """(max |out - ref|, None or why out fails the rule every output is held to: a NaN in it,
        or |out - ref| > ATOL + RTOL |ref| somewhere); `what` names the difference."""
        dif = (out.float() - ref.float()).abs()
        worst = dif.max().item()
        excess = (dif - RTOL * ref.float().abs()).max().item()
        del dif
        if torch.isnan(out).any():
            return worst, "NaN in O"
        if excess > ATOL:
            return worst, f"{what} max {worst:.3e} over tolerance"
        return worst, None

    def run_case(group, name, st, flex, s, hq, hkv, d):
        b_ = TOKENS // s
        row = dict(group=group, variant=name, label=variant_label(name, s), S=s, batch=b_,
                   heads_q=hq, heads_kv=hkv, head_dim=d, kernel=st["kname"], kept=st["kept"],
                   density=st["kept"] / (s * s), status="not run")
        flops = 4 * b_ * hq * st["kept"] * d
        scale = 1.0 / math.sqrt(d)
        gqa = hq != hkv
        eager_ref = args.reference == "eager"
        ref_name = "O_eager" if eager_ref else "O_flex"
        q = torch.randn(b_, hq, s, d, device=dev, dtype=bf16)
        k = torch.randn(b_, hkv, s, d, device=dev, dtype=bf16)
        v = torch.randn(b_, hkv, s, d, device=dev, dtype=bf16)
        ref, flex_call, sdpa_call = None, None, None

        def run_flex():
            """FlexAttention's output (None when it raised) and its timing; with the eager
            reference, its output checked against it (flex_status)."""
            nonlocal flex_call
            fkw = dict(score_mod=st["score_mod"], block_mask=st["block_mask"])
            if gqa:
                fkw["enable_gqa"] = True
            try:
                t0 = time.time()
                out = flex(q, k, v, **fkw)
                torch.cuda.synchronize()
                row["flex_first_call_s"] = round(time.time() - t0, 2)
                if eager_ref and ref is not None:
                    row["flex_max_abs_diff"], bad = check_out(out, ref, "|O_flex - O_eager|")
                    row["flex_status"] = "wrong: " + bad if bad else "ok"
                flex_call = lambda: flex(q, k, v, **fkw)  # noqa: E731
                # A wrong Flex is still timed: its time stays in the table, marked.
                row["flex_ms"] = bench(flex_call)
                row["flex_tflops"] = tflops(flops, row["flex_ms"])
                return out
            except Exception as e:  # noqa: BLE001
                row["flex_error"] = short(e)
                if eager_ref:
                    row["flex_status"] = "failed: " + row["flex_error"]
                return None

        def prepare(folder, prefix):
            """Runs the kernel of `folder` once and checks O; returns its timed call, or None."""
            lib = get_lib(st["kname"], folder)
            o = torch.full_like(q, float("nan"))
            lse = torch.full((b_, hq, s), float("nan"), device=dev, dtype=torch.float32)
            p, ws = make_params(lib, q, k, v, o, lse, scale, st["bufs"])
            pref = ctypes.byref(p)
            stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
            # Kernels with the split entry points are checked through them: tables, then attention.
            split = hasattr(lib, "cubridge_attn_fwd_attention")
            if split:
                err = lib.cubridge_attn_fwd_tables(pref, stream) or lib.cubridge_attn_fwd_attention(pref, stream)
            else:
                err = lib.cubridge_attn_fwd(pref, stream)
            torch.cuda.synchronize()
            if err != 0:
                row[prefix + "status"] = f"FAIL: launcher returned {err}"
                return None
            if ref is None:
                row[prefix + "status"] = ("unchecked: no eager reference output" if eager_ref
                                          else "unchecked: no FlexAttention output")
            else:
                row[prefix + "max_abs_diff"], bad = check_out(o, ref, f"|O - {ref_name}|")
                row[prefix + "status"] = "FAIL: " + bad if bad else "ok"
            keep = (p, ws, o, lse)  # alive while the call is timed
            if split and has_tables(folder, st["kname"]):
                # Block tables, like Flex's block mask, are built once outside the timing (a
                # model's layers share them); their own time goes in the row and the notes.
                row[prefix + "tables_ms"] = bench(lambda: lib.cubridge_attn_fwd_tables(pref, stream))
                return lambda: (keep, lib.cubridge_attn_fwd_attention(pref, stream))
            return lambda: (keep, lib.cubridge_attn_fwd(pref, stream))

        def check_and_time():
            """Every kernel set checked against the reference and timed as the mode asks (alone,
            A/B, or the candidates' pick); returns the row's timed call, or None."""
            try:
                call_a = prepare(args.dir, "")
                calls = [prepare(f, pre) if offered(f, st["kname"], d) else None
                         for f, pre in zip(others, prefixes)]
                call_b = calls[0] if calls else None
                if args.candidate:
                    row["status"] = pick_candidate(row, [call_a] + calls)
                elif call_a and not call_b:
                    row["cubridge_ms"] = bench(call_a)
                elif call_a and call_b:
                    row["cubridge_ms"], row["b_ms"] = alternate([call_a, call_b], args.rounds)
                    row["b_tflops"] = tflops(flops, row["b_ms"])
                    row["b_over_a"] = row["cubridge_ms"] / row["b_ms"]
                if row.get("cubridge_ms"):
                    row["cubridge_tflops"] = tflops(flops, row["cubridge_ms"])
                    return calls_by_tile(row, [call_a] + calls)
            except Exception as e:  # noqa: BLE001
                row["status"] = "FAIL: " + short(e)
            return None

        if eager_ref:
            # The reference first, then CuBridge checked and timed alone, then Flex: a Flex fault
            # (an illegal memory access) leaves no CUDA context, and no time of ours after it.
            try:
                fn, row["reference_head_chunk"] = make_eager(
                    q, k, v, scale, st["neg"], st["eager_score"], st["mask_mod"], fp32=True)
                ref = fn()
                torch.cuda.synchronize()
                del fn
            except Exception as e:  # noqa: BLE001  (OOM included)
                row["reference_error"] = short(e)
                ref = None
                torch.cuda.empty_cache()
            ours = check_and_time()
            run_flex()
        else:
            ref = run_flex()

        # SDPA: fastest of cuDNN / flash / efficient.
        if st["sdpa"]:
            if name == "causal":
                kw = {"is_causal": True}
            elif st["dense"] is not None:
                kw = {"attn_mask": st["dense"]}
            else:
                kw = {}
            best, tried, kr, vr = None, [], None, None
            for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION,
                            SDPBackend.EFFICIENT_ATTENTION):
                bname = backend.name.split("_")[0].lower()
                for form in (("gqa", "rep") if gqa else ("plain",)):
                    try:
                        if form == "rep":
                            if kr is None:
                                kr = k.repeat_interleave(hq // hkv, dim=1)
                                vr = v.repeat_interleave(hq // hkv, dim=1)
                            qkv, kw2, label = (q, kr, vr), kw, bname + ", kv rep."
                        else:
                            qkv = (q, k, v)
                            kw2 = dict(kw, enable_gqa=True) if form == "gqa" else kw
                            label = bname
                        with sdpa_kernel([backend]):
                            out = F.scaled_dot_product_attention(*qkv, **kw2)
                            torch.cuda.synchronize()
                            ms = bench(lambda: F.scaled_dot_product_attention(*qkv, **kw2))
                    except Exception as e:  # noqa: BLE001  backend refuses this case
                        tried.append(f"{bname}/{form}: {type(e).__name__}")
                        continue
                    diff = check_out(out, ref)[0] if ref is not None else None
                    tried.append(f"{bname}/{form}: {ms:.3f} ms")
                    if best is None or ms < best[0]:
                        best = (ms, label, diff)
                        sdpa_call = (backend, lambda qkv=qkv, kw2=kw2:
                                     F.scaled_dot_product_attention(*qkv, **kw2))
                    del out
                    break  # one working form per backend
            row["sdpa_tried"] = tried
            if best:
                row["sdpa_ms"], row["sdpa_backend"], row["sdpa_max_abs_diff"] = best
                row["sdpa_tflops"] = tflops(flops, best[0])
            else:
                row["sdpa_error"] = "no backend ran: " + "; ".join(tried)
            del kr, vr

        # Eager PyTorch.
        try:
            if args.against or SUITE:  # A/B mode: eager is not what is compared; suites: the
                raise SkipEager        # targets are Flex's
            fn, hc = make_eager(q, k, v, scale, st["neg"], st["eager_score"])
            row["eager_head_chunk"] = hc
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = fn()
            torch.cuda.synchronize()
            first = time.perf_counter() - t0
            row["eager_first_call_s"] = round(first, 3)
            if ref is not None:
                row["eager_max_abs_diff"] = check_out(out, ref)[0]
            del out
            if first > EAGER_MAX_CALL_S:
                row["eager_note"] = f"not timed: one call took {first:.2f} s (> {EAGER_MAX_CALL_S} s)"
            else:
                row["eager_ms"] = time_calls(fn) if first > 0.05 else bench(fn, rep=EAGER_REP_MS)
                row["eager_tflops"] = tflops(flops, row["eager_ms"])
            del fn
        except SkipEager:
            pass
        except Exception as e:  # noqa: BLE001  (OOM included)
            row["eager_note"] = "failed: " + short(e)
            torch.cuda.empty_cache()

        # Against Flex, CuBridge last (its lowered kernel may still be building).
        if not eager_ref:
            ours = check_and_time()
        # With the eager reference not after a Flex error: it may have been a fault that took the
        # CUDA context, and CuBridge's time alone then stands.
        if ours and not args.against and not (eager_ref and row.get("flex_error")):
            try:
                final_rotation(row, flops, ours, flex_call, sdpa_call)
                torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001
                row["status"] = "FAIL: " + short(e)

        return row

    def alternate(calls, rounds, rep=AB_REP_MS):
        """Median times of the calls, timed in rotation (A B, B A, ... for two; A B C, B C A, ...
        for three): drift within a round does not fall on one call alone."""
        times = [[] for _ in calls]
        for i in range(rounds):
            for j in range(len(calls)):
                k = (i + j) % len(calls)
                times[k].append(bench(calls[k], rep=rep))
        return tuple(statistics.median(t) for t in times)

    def offered(folder, kname, d):
        """Whether a row at head dim d plays `folder`: always outside candidate mode."""
        return not args.candidate or tile_label(folder, kname) in SM90_TILES.get(d, ())

    def pick_candidate(row, calls):
        """Candidate mode: the fastest of the verified kernels, then timed alone; the row's status."""
        folders, keys = [args.dir] + others, [""] + prefixes
        played = [i == 0 or offered(f, row["kernel"], row["head_dim"]) for i, f in enumerate(folders)]
        folders, keys, calls = ([x for x, p in zip(xs, played) if p] for xs in (folders, keys, calls))
        labels = [tile_label(f, row["kernel"]) for f in folders]
        bad = [f"{t}: {row.get(k + 'status', 'not run')}" for t, k in zip(labels, keys)
               if row.get(k + "status") != "ok"]
        if bad:
            return "FAIL: " + "; ".join(bad)
        times = alternate(calls, 2)
        best = min(range(len(calls)), key=lambda i: times[i])
        row["tile"] = labels[best]
        row["picked"] = keys[best][:-1] if keys[best] else "a"
        row["candidate_ms"] = dict(zip(labels, times))
        row["cubridge_ms"] = bench(calls[best])
        return "ok"

    def calls_by_tile(row, calls):
        """The timed call of the row's kernel: the candidate picked, or the one plain kernel."""
        keys = [""] + prefixes
        return calls[keys.index(row["picked"] + "_")] if row.get("picked", "a") != "a" else calls[0]

    def final_rotation(row, flops, ours, flex_call, sdpa_call):
        """The row's reported times: CuBridge, Flex and SDPA's pick timed in rotation, as A/B mode
        times A and B (why: the module's docstring); the first times stay as *_ms_alone."""
        backend, sdpa_fn = sdpa_call if sdpa_call else (None, None)
        named = [("cubridge", ours), ("flex", flex_call), ("sdpa", sdpa_fn)]
        named = [(n, c) for n, c in named if c is not None and row.get(n + "_ms")]
        # The picked SDPA backend stays selected through the rotation (no other call uses SDPA),
        # so its calls carry no per-call context switch.
        with sdpa_kernel([backend]) if backend is not None else contextlib.nullcontext():
            times = alternate([c for _, c in named], FINAL_ROUNDS, rep=REP_MS)
        for (n, _), t in zip(named, times):
            row[n + "_ms_alone"] = row[n + "_ms"]
            row[n + "_ms"] = t
            row[n + "_tflops"] = tflops(flops, t)

    rows = []
    write_outputs(meta, rows)
    for group, name, cases in groups:
        if args.budget_s and time.time() - t_start > args.budget_s:
            print(f"[{time.time() - t_start:6.1f}s] budget of {args.budget_s} s spent: stopping", flush=True)
            break
        print(f"[{time.time() - t_start:6.1f}s] == {group} / {name}: dynamo reset, {len(cases)} cases", flush=True)
        # A fresh compile per group: past dynamo's recompile limit flex_attention would silently
        # fall back to its unfused path.
        torch._dynamo.reset()
        flex = torch.compile(flex_attention, dynamic=False)
        try:
            mod = load_spec(name)
        except Exception as e:  # noqa: BLE001
            print(f"  cannot load spec {name}: {short(e)}", flush=True)
            continue
        for s, hq, hkv, d in cases:
            t0 = time.time()
            try:
                st = setup(name, mod, s, hq, hkv)
                row = run_case(group, name, st, flex, s, hq, hkv, d)
                if st.get("per_bh"):
                    row["kept_note"] = "mean over (b, h)"
            except Exception as e:  # noqa: BLE001  setup failed: record and go on
                traceback.print_exc()
                row = dict(group=group, variant=name, label=variant_label(name, s), S=s,
                           batch=TOKENS // s, heads_q=hq, heads_kv=hkv, head_dim=d, density=None,
                           status="FAIL: " + short(e))
            row["case_s"] = round(time.time() - t0, 1)
            rows.append(row)
            sd = (f"{row['sdpa_tflops']:.1f} ({row['sdpa_backend']})" if row.get("sdpa_tflops")
                  else "—")
            mad = row.get("max_abs_diff")
            fst = row.get("flex_status", "ok")  # its error, if any, is printed below
            fst = "" if fst == "ok" else " [failed]" if row.get("flex_error") else f" [{fst}]"
            print(f"[{time.time() - t_start:6.1f}s] {group:13s} {name:21s} S={s:5d} B={TOKENS // s:2d} "
                  f"{hq:3d}/{hkv:<3d} d={d:3d}  dens {row['density'] if row['density'] is None else round(row['density'], 3)}  "
                  f"cubridge {fmt_tf(row.get('cubridge_tflops'))} [{row['status']}"
                  f"{'' if mad is None else f', |dO| {mad:.1e}'}]  flex {fmt_tf(row.get('flex_tflops'))}{fst}"
                  f" (first call {row.get('flex_first_call_s', '?')} s)  sdpa {sd}  "
                  f"eager {fmt_tf(row.get('eager_tflops'))}  [case {row['case_s']} s]", flush=True)
            if args.against:
                print(f"    B {fmt_tf(row.get('b_tflops'))} [{row.get('b_status', 'not run')}]  "
                      f"B/A {row.get('b_over_a', 0):.3f}", flush=True)
            flops = 4 * row["batch"] * hq * (row.get("kept") or 0) * d
            if row.get("candidate_ms"):
                print("    candidates in rotation: " + ", ".join(
                    f"{t} {fmt_tf(tflops(flops, ms))}" for t, ms in row["candidate_ms"].items()),
                      flush=True)
            alone = [f"{n} {fmt_tf(tflops(flops, row[n + '_ms_alone']))}"
                     for n in ("cubridge", "flex", "sdpa") if row.get(n + "_ms_alone")]
            if alone:
                print("    timed alone first (not reported): " + ", ".join(alone), flush=True)
            for key in ("reference_error", "flex_error", "sdpa_error", "eager_note"):
                if row.get(key):
                    print(f"    {key}: {row[key]}", flush=True)
            write_outputs(meta, rows)
    pool.shutdown(wait=False)
    meta["finished"] = len(rows) == planned
    meta["elapsed_s"] = round(time.time() - t_start, 1)
    write_outputs(meta, rows)
    print(f"[{time.time() - t_start:6.1f}s] done: {len(rows)} of {planned} cases", flush=True)
    if args.against:
        print_ab(rows, args.dir, args.against)
    emit(render_section([meta], rows), args.out)


class SkipEager(Exception):
    """A/B mode times the two kernel sets, Flex and SDPA, not eager."""


def print_ab(rows, a, b):
    print(f"\nA/B: A = {a}, B = {b} (TFLOP/s on kept elements; B/A = time A / time B)")
    print("| heads | variant | head dim | S | A | B | B/A | Flex | SDPA | A/Flex | B/Flex |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    ratios = []
    for r in rows:
        fl = r.get("flex_tflops")
        ta, tb = r.get("cubridge_tflops"), r.get("b_tflops")
        if ta and tb:
            ratios.append(r["b_over_a"])
        print(f"| {r['heads_q']}/{r['heads_kv']} | {r['variant']} | {r['head_dim']} | {fmt_s(r['S'])} | {fmt_tf(ta)} | "
              f"{fmt_tf(tb)} | {r.get('b_over_a', 0):.3f} | {fmt_tf(fl)} | {fmt_tf(r.get('sdpa_tflops'))} | "
              f"{(ta / fl) if ta and fl else 0:.2f} | {(tb / fl) if tb and fl else 0:.2f} |")
    if ratios:
        print(f"geomean B/A over {len(ratios)} rows: "
              f"{math.exp(sum(math.log(x) for x in ratios) / len(ratios)):.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", nargs="?", help="folder with NAME_sm_90.cu (bench/make_kernels.sh)")
    ap.add_argument("--arch", choices=("sm_90", "sm_80"), default="sm_90",
                    help="the expert the kernels were lowered for: NAME_<ARCH>.cu "
                         "(CUBRIDGE_ARCH=sm_80 bash bench/make_kernels.sh DIR); sm_80 runs on Hopper too")
    ap.add_argument("--out", help="append the markdown section to this file (default: print only)")
    ap.add_argument("--only", help="regex on variant names")
    ap.add_argument("--seqlens", default="1024,8192")
    ap.add_argument("--heads", default=",".join(HEADS), help="head configs: " + ", ".join(HEADS))
    ap.add_argument("--extra-hdims", default="64,256",
                    help="causal at these head dims with Llama2-7B heads ('' for none)")
    ap.add_argument("--budget-s", type=float, default=0,
                    help="start no new (head config, variant) group after this many seconds (0: no limit)")
    ap.add_argument("--against", metavar="DIR2",
                    help="A/B mode: a second kernel folder, timed in alternation with DIR")
    ap.add_argument("--candidate", metavar="DIR2", nargs="+",
                    help="the same variants at other tiles: each row keeps the fastest verified kernel")
    ap.add_argument("--reference", choices=("flex", "eager"), default="flex",
                    help="each row's reference O: FlexAttention's (default), or eager PyTorch in fp32, "
                         "computed first, with CuBridge timed before Flex runs and Flex checked too")
    ap.add_argument("--rounds", type=int, default=5, help="A/B mode: A B pairs of timings per case")
    ap.add_argument("--rebuild", action="store_true", help="rebuild every .so even if up to date")
    ap.add_argument("--merge", nargs="+", metavar="JSON",
                    help="render one section from matrix_rows.json files of earlier runs (no GPU)")
    ap.add_argument("--suite", metavar="NAME",
                    help="the variants of examples/specs/NAME/suite.json instead of the twelve examples "
                         "(kernels: CUBRIDGE_SUITE=NAME bash bench/make_kernels.sh DIR); no eager, no extra head dims")
    args = ap.parse_args()
    global ARCH
    ARCH = args.arch
    if args.candidate and ARCH != "sm_90":
        ap.error("--candidate plays the sm_90 autotuner's tiles (SM90_TILES); use --against for sm_80")
    if args.suite:
        global SUITE, VARIANTS
        SUITE = suites.Suite(ROOT, args.suite)
        VARIANTS = tuple(SUITE.names)
        args.extra_hdims = ""
    if args.merge:
        merge(args.merge, args.out)
        return
    if not args.dir:
        ap.error("DIR is required (or --merge)")
    args.dir = os.path.abspath(args.dir)
    if args.against and args.candidate:
        ap.error("--against (A/B of two kernel sets) and --candidate (keep the faster) exclude each other")
    if args.reference == "eager" and (args.against or args.candidate):
        ap.error("--reference eager times CuBridge alone before Flex runs; --against and --candidate "
                 "time kernel sets against each other and are not supported with it")
    if args.against:
        args.against = os.path.abspath(args.against)
    if args.candidate:
        args.candidate = [os.path.abspath(c) for c in args.candidate]
    run(args)


if __name__ == "__main__":
    main()
