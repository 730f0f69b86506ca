# Runs lowered kernels (NAME_sm_90.cu in the folder given, as written by lower_tests with
# CUBRIDGE_KEEP_TEST_FILES=1) through their C launcher against a dense torch reference on the GPU.
#   python3 bench/lowered/check.py DIR [sm_90]
import collections, ctypes, math, os, subprocess, sys, concurrent.futures as cf
import torch

HERE = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
ARCH = sys.argv[2] if len(sys.argv) > 2 else "sm_90"


class Buffer(ctypes.Structure):
    """cubridge_attn_fwd_buffer: one captured tensor (launch_abi.cuh)."""
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int32), ("rank", ctypes.c_int32),
                ("sizes", ctypes.c_int64 * 4), ("strides", ctypes.c_int64 * 4)]


DTYPE_CODES = {torch.int32: 0, torch.int64: 1, torch.bool: 2, torch.float32: 3,
               torch.bfloat16: 4, torch.float16: 5}


def set_buffer(p, i, t):
    p.buffers[i].data = t.data_ptr()
    p.buffers[i].dtype = DTYPE_CODES[t.dtype]
    p.buffers[i].rank = t.dim()
    for d in range(t.dim()):
        p.buffers[i].sizes[d] = t.shape[d]
        p.buffers[i].strides[d] = t.stride(d)


class Params(ctypes.Structure):
    _fields_ = ([("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p),
                 ("o", ctypes.c_void_p), ("lse", ctypes.c_void_p)] +
                [(f"{t}_{s}_stride", ctypes.c_int64) for t in "qkvo" for s in ("batch", "head", "row")] +
                [("lse_batch_stride", ctypes.c_int64), ("lse_head_stride", ctypes.c_int64)] +
                [(n, ctypes.c_int32) for n in ("batch", "heads_q", "heads_kv", "head_dim", "seqlen_q", "seqlen_kv", "dtype")] +
                [("softmax_scale", ctypes.c_float), ("buffers", Buffer * 8), ("workspace", ctypes.c_void_p),
                 ("workspace_size", ctypes.c_size_t)])


def arch_flags(arch):
    """sm_90 kernels build for sm_90a: the Hopper expert needs wgmma and setmaxnreg (the sm_80
    expert builds for it too)."""
    num = arch.removeprefix("sm_")
    return [f"-gencode=arch=compute_{num}a,code=sm_{num}a"] if num == "90" else [f"-arch={arch}"]


def build_from(folder, name, arch=None):
    arch = arch or ARCH
    src = os.path.join(folder, f"{name}_{arch}.cu")
    so = os.path.join(folder, f"{name}.so")
    r = subprocess.run(["nvcc", "-shared", "-Xcompiler", "-fPIC", "-std=c++17", *arch_flags(arch), "-O3",
                        "-o", so, src], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{name}: nvcc failed\n{r.stderr}")
    return so


def build(name):
    return build_from(HERE, name)


def load(so):
    """A built kernel's C launcher, with the return types of its entry points declared."""
    lib = ctypes.CDLL(so)
    lib.cubridge_attn_fwd.restype = ctypes.c_int
    lib.cubridge_attn_fwd_workspace_size.restype = ctypes.c_size_t
    return lib


def load_files(srcs, arch="sm_90"):
    """Kernel files DIR/NAME_<arch>.cu, each built to DIR/NAME.so (all at once: the nvcc runs are
    independent) and loaded, in order."""
    suffix = f"_{arch}.cu"

    def build_file(src):
        src = os.path.abspath(src)
        return build_from(os.path.dirname(src), os.path.basename(src)[:-len(suffix)], arch)

    with cf.ThreadPoolExecutor() as pool:
        return [load(so) for so in pool.map(build_file, srcs)]


def file_label(src):
    """A kernel file's label in timing tables: its folder and file name (SET/NAME_sm_90.cu)."""
    src = os.path.abspath(src)
    return os.path.basename(os.path.dirname(src)) + "/" + os.path.basename(src)


def make_doc(n, seed):
    g = torch.Generator().manual_seed(seed)
    lens = []
    while sum(lens) < n:
        lens.append(int(torch.randint(1, 120, (1,), generator=g)))
    return torch.repeat_interleave(torch.arange(len(lens)), torch.tensor(lens))[:n].to(torch.int32)


def bench_documents(n, seed=7):
    """The benchmarks' document ids (CPU, int32): 16 documents of n/8 to n/2 tokens cut at n, then
    padding id 16."""
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(n // 8, n // 2, (16,), generator=g)
    ids = torch.repeat_interleave(torch.arange(16), lens)[:n]
    return torch.cat([ids, ids.new_full((n - ids.numel(),), 16)]).to(torch.int32)


# Each variant: (hq, hkv, buffers(b, sq, skv) -> list, mask(b, h, q, kv, bufs) -> bool tensor|None,
#                score_mod(s, b, h, q, kv) -> s|None)
def variants():
    W, G, cap, H = 256, 64, 20.0, 8
    doc_cache = {}

    def doc1(b, sq, skv):
        return [make_doc(max(sq, skv), 1)]

    def docb(b, sq, skv):
        d = torch.cat([make_doc(skv, 10 + i) for i in range(b)])
        prefix = torch.tensor([7 * (i + 1) for i in range(b)], dtype=torch.int32)
        return [d, prefix]

    def pbuf(b, sq, skv):
        g = torch.Generator().manual_seed(5)
        t = torch.randint(-1, 3, (skv,), generator=g).to(torch.int32)
        t[:2] = -1  # rows 0 and 1 keep nothing: O = 0, LSE = -inf
        return [t]

    return {
        "base": (4, 4, None, None, None),
        "gqa": (8, 2, None, None, None),
        "causal": (4, 4, None, lambda b, h, q, kv, B: q >= kv, None),
        "sliding_window": (4, 4, None, lambda b, h, q, kv, B: (q >= kv) & (q - kv <= W), None),
        "global_window": (4, 4, None, lambda b, h, q, kv, B: (q >= kv) & ((q - kv <= W) | (kv < G)), None),
        "document": (4, 4, doc1, lambda b, h, q, kv, B: (q >= kv) & (B[0][q] == B[0][kv]), None),
        "document_batched": (4, 4, docb,
                             lambda b, h, q, kv, B: (B[0][b * SKV + q] == B[0][b * SKV + kv]) | (kv < B[1][b]), None),
        "softcap_alibi": (4, 4, None, None,
                          lambda s, b, h, q, kv: (cap * torch.tanh(s / cap)) + (kv - q) * torch.exp2(-8.0 * (h + 1) / H)),
        "renamed_symbols": (4, 4, pbuf, lambda b, h, q, kv, B: (q >= kv) & (B[0][kv] >= 0), None),
    }


SKV = 333


def make_inputs(B, hq, hkv, sq, skv, D, dtype):
    """Random Q, K, V on the GPU, and O and LSE poisoned with NaN (a row the kernel skips shows)."""
    q = torch.randn(B, hq, sq, D, device="cuda", dtype=dtype)
    k = torch.randn(B, hkv, skv, D, device="cuda", dtype=dtype)
    v = torch.randn(B, hkv, skv, D, device="cuda", dtype=dtype)
    o = torch.full_like(q, float("nan"))
    lse = torch.full((B, hq, sq), float("nan"), device="cuda")
    return q, k, v, o, lse


Comparison = collections.namedtuple("Comparison", "ok max_do max_dlse inf_rows_match nan_o")


def compare(err, o, lse, ro, rl):
    """One call's O and LSE against the reference's: ok when the launcher returned 0, |dO| < 2e-2,
    |dLSE| < 1e-3 over the rows with keys, the rows without (-inf LSE) are the same rows, and O
    has no NaN (the outputs are poisoned with NaN before the call)."""
    max_do = (o.float() - ro).abs().max().item()
    finite = torch.isfinite(rl)
    max_dlse = (lse[finite] - rl[finite]).abs().max().item() if finite.any() else 0.0
    inf_rows_match = bool(torch.equal(torch.isneginf(lse), torch.isneginf(rl)))
    nan_o = bool(torch.isnan(o).any())
    ok = err == 0 and max_do < 2e-2 and max_dlse < 1e-3 and inf_rows_match and not nan_o
    return Comparison(ok, max_do, max_dlse, inf_rows_match, nan_o)


def reference(q, k, v, scale, hq, hkv, mask, smod, bufs):
    B, _, SQ, D = q.shape
    skv = k.shape[2]
    rep = hq // hkv
    kf = k.float().repeat_interleave(rep, dim=1)
    vf = v.float().repeat_interleave(rep, dim=1)
    s = torch.einsum("bhqd,bhkd->bhqk", q.float(), kf) * scale
    bi = torch.arange(B, device=q.device).view(B, 1, 1, 1)
    hi = torch.arange(hq, device=q.device).view(1, hq, 1, 1)
    qi = torch.arange(SQ, device=q.device).view(1, 1, SQ, 1)
    ki = torch.arange(skv, device=q.device).view(1, 1, 1, skv)
    if smod is not None:
        s = smod(s, bi, hi, qi, ki)
    if mask is not None:
        keep = mask(bi, hi, qi, ki, [x.to(q.device).long() for x in bufs]).expand_as(s)
        s = torch.where(keep, s, torch.tensor(-math.inf, device=q.device))
    m = s.amax(-1, keepdim=True)
    m_use = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    p = torch.exp(s - m_use)
    l = p.sum(-1, keepdim=True)
    o = torch.where(l > 0, (p @ vf) / l.clamp_min(1e-30), torch.zeros_like(l))
    lse = torch.where(l > 0, m_use + torch.log(l.clamp_min(1e-30)), torch.full_like(l, -math.inf)).squeeze(-1)
    return o, lse


def make_params(lib, q, k, v, o, lse, scale, bufs, dtype_code=0):
    """Params for one call, its workspace and the buffers on the GPU (keep all three alive)."""
    p = Params()
    p.q, p.k, p.v, p.o, p.lse = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr()
    for name, t in (("q", q), ("k", k), ("v", v), ("o", o)):
        setattr(p, f"{name}_batch_stride", t.stride(0))
        setattr(p, f"{name}_head_stride", t.stride(1))
        setattr(p, f"{name}_row_stride", t.stride(2))
    p.lse_batch_stride, p.lse_head_stride = lse.stride(0), lse.stride(1)
    p.batch, p.heads_q, p.heads_kv, p.head_dim = q.shape[0], q.shape[1], k.shape[1], q.shape[3]
    p.seqlen_q, p.seqlen_kv, p.dtype, p.softmax_scale = q.shape[2], k.shape[2], dtype_code, scale
    dev_bufs = [b.cuda() for b in bufs]
    for i, b in enumerate(dev_bufs):
        set_buffer(p, i, b)
    ws_size = lib.cubridge_attn_fwd_workspace_size(ctypes.byref(p))
    ws = torch.empty(max(ws_size, 1), dtype=torch.uint8, device="cuda")
    p.workspace, p.workspace_size = ws.data_ptr(), ws_size
    return p, ws, dev_bufs


def run(lib, q, k, v, o, lse, scale, bufs, dtype_code):
    p, ws, dev_bufs = make_params(lib, q, k, v, o, lse, scale, bufs, dtype_code)
    err = lib.cubridge_attn_fwd(ctypes.byref(p), ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
    torch.cuda.synchronize()
    return err, p.workspace_size, p


def main():
    names = list(variants().keys())
    with cf.ThreadPoolExecutor(12) as ex:
        libs = dict(zip(names, ex.map(build, names)))
    failures = 0
    torch.manual_seed(0)
    for name, (hq, hkv, mkbufs, mask, smod) in variants().items():
        lib = load(libs[name])
        dims = (64, 128, 256) if name in ("base", "causal", "document") else (128,)
        for dtype, code in ((torch.bfloat16, 0), (torch.float16, 1)):
            for D in dims:
                B, SQ = 2, 300
                q, k, v, o, lse = make_inputs(B, hq, hkv, SQ, SKV, D, dtype)
                scale = 1.0 / math.sqrt(D)
                bufs = mkbufs(B, SQ, SKV) if mkbufs else []
                err, ws, _ = run(lib, q, k, v, o, lse, scale, bufs, code)
                ro, rl = reference(q, k, v, scale, hq, hkv, mask, smod, bufs)
                c = compare(err, o, lse, ro, rl)
                failures += not c.ok
                print(f"{'OK  ' if c.ok else 'FAIL'} {name:18s} {str(dtype):15s} D={D:3d} err={err} ws={ws} "
                      f"max|dO|={c.max_do:.2e} max|dLSE|={c.max_dlse:.2e} "
                      f"-inf rows match={c.inf_rows_match} nan={c.nan_o} "
                      f"empty rows={int((~torch.isfinite(rl)).sum())}")
    # Launcher refusals: a missing buffer, a too-short buffer, a missing workspace.
    lib = load(libs["document"])
    q = torch.randn(1, 2, 100, 64, device="cuda", dtype=torch.bfloat16)
    o = torch.empty_like(q)
    lse = torch.empty(1, 2, 100, device="cuda")
    for case in ("no buffer", "short buffer", "no workspace"):
        bufs = [] if case == "no buffer" else [torch.zeros(50 if case == "short buffer" else 100, dtype=torch.int32)]
        p = Params()
        p.q = p.k = p.v = q.data_ptr(); p.o = o.data_ptr(); p.lse = lse.data_ptr()
        for t in "qkvo":
            setattr(p, f"{t}_batch_stride", q.stride(0)); setattr(p, f"{t}_head_stride", q.stride(1)); setattr(p, f"{t}_row_stride", q.stride(2))
        p.lse_batch_stride, p.lse_head_stride = lse.stride(0), lse.stride(1)
        p.batch, p.heads_q, p.heads_kv, p.head_dim, p.seqlen_q, p.seqlen_kv, p.dtype, p.softmax_scale = 1, 2, 2, 64, 100, 100, 0, 0.125
        dev = [b.cuda() for b in bufs]
        for i, b in enumerate(dev):
            set_buffer(p, i, b)
        err = lib.cubridge_attn_fwd(ctypes.byref(p), None)
        ok = err == 1
        failures += not ok
        print(f"{'OK  ' if ok else 'FAIL'} refuses {case}: err={err}")
    print("FAILURES", failures)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
