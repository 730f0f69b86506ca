"""The PyTorch entry point on a GPU (issue 27), with PyTorch 2.x and the op library built with
CUDA: run on the device, from the repository root, after building cubridge_torch and cubridge-cli.

    PYTHONPATH=build-dev/python python3 tests/python/gpu_check.py --out $OUT/torch_gpu.json

  numerics  cubridge.attention against flex_attention (O and LSE, fp32 reference inputs) for
            variants of each class, at ragged shapes; a second shape reuses the kernel
  graph     capture and replay in a CUDA graph
  block     a transformer block (inference) with a document mask and learned ALiBi slopes,
            against the same block with torch.compile(flex_attention): outputs and time
  process   a variant's first call in a new process: no pipeline run, module loaded from disk
  backward  the error a gradient gets
  compile   a module calling cubridge.attention under torch.compile(fullgraph=True)
One line per check; the JSON has the figures. Exit 1 when a check fails."""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import traceback

import torch

if not torch.cuda.is_available():  # before the imports a CPU-only torch (1.13) lacks
    print("gpu_check: no CUDA GPU here: skipped")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ.setdefault("CUBRIDGE_TORCH_CACHE", tempfile.mkdtemp(prefix="cubridge-gpu-check-"))

import cubridge  # noqa: E402
from cubridge import _kernels  # noqa: E402
from torch.nn.attention.flex_attention import flex_attention  # noqa: E402

DEV = "cuda"
G = torch.Generator(device=DEV).manual_seed(27)

# ---- variants as users write them -----------------------------------------------------------
SLOPES = torch.linspace(-0.5, -0.01, 8, device=DEV)


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def sliding(window):
    def mask_mod(b, h, q_idx, kv_idx):
        return (q_idx - kv_idx).abs() <= window
    return mask_mod


def documents(doc):
    def mask_mod(b, h, q_idx, kv_idx):
        return (doc[q_idx] == doc[kv_idx]) & (q_idx >= kv_idx)
    return mask_mod


def learned_alibi(score, b, h, q_idx, kv_idx):
    return score + SLOPES[h] * (kv_idx - q_idx)


def softcap(cap):
    def score_mod(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap)
    return score_mod


def full_bias(bias):
    def score_mod(score, b, h, q_idx, kv_idx):
        return score + bias[b, h, q_idx, kv_idx]
    return score_mod


def t5_table(table):
    def bucket(rel, n: int):
        return torch.clamp(rel, -n, n) + n

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + table[h, bucket(kv_idx - q_idx, 15)]
    return score_mod


def padding(lengths):
    return lambda b, h, q_idx, kv_idx: (kv_idx < lengths[b]) & (q_idx >= kv_idx)


def doc_ids(n):
    cuts = sorted(torch.randperm(n - 1, generator=torch.Generator().manual_seed(n))[:3].tolist())
    ids = torch.zeros(n, dtype=torch.int32)
    for c in cuts:
        ids[c + 1:] += 1
    return ids.to(DEV)


def variants(b, hq, s_max):
    return {
        "causal": dict(mask_mod=causal),
        "sliding_window (closure int)": dict(mask_mod=sliding(64)),
        "document mask (int32 [S])": dict(mask_mod=documents(doc_ids(s_max))),
        "learned ALiBi (float32 [H], global)": dict(mask_mod=causal, score_mod=learned_alibi),
        "softcap (tanh, closure float)": dict(score_mod=softcap(20.0)),
        "full bias (bf16 [B,H,S,S])": dict(score_mod=full_bias(
            torch.randn(b, hq, s_max, s_max, generator=G, device=DEV).to(torch.bfloat16))),
        "T5 table (float32 [H,31], helper)": dict(score_mod=t5_table(
            torch.randn(hq, 31, generator=G, device=DEV))),
        "padding (int32 [B], lambda)": dict(mask_mod=padding(
            torch.tensor([s_max // 3, s_max], dtype=torch.int32, device=DEV)[:b])),
    }


def reference(q, k, v, mods, scale):
    """flex_attention eager in fp32: the numerics' reference."""
    o, lse = flex_attention(q.float(), k.float(), v.float(), scale=scale, enable_gqa=True,
                            return_lse=True, **mods)
    return o, lse


def compare(o, lse, ro, rlse):
    keep = torch.isfinite(rlse)
    d_o = (o.float() - ro).abs()[keep].max().item() if keep.any() else 0.0
    d_lse = (lse - rlse).abs()[keep].max().item() if keep.any() else 0.0
    return d_o, d_lse


def rand(*shape):
    return torch.randn(*shape, generator=G, device=DEV).to(torch.bfloat16)


def check_numerics(report):
    b, hq, hkv, d = 2, 8, 2, 128
    shapes = [(300, 257), (1000, 1000)]
    ok = True
    for name, mods in variants(b, hq, max(max(s) for s in shapes)).items():
        row = {"variant": name}
        try:
            fn = cubridge.compile(**mods)
            for i, (sq, skv) in enumerate(shapes):
                q, k, v = rand(b, hq, sq, d), rand(b, hkv, skv, d), rand(b, hkv, skv, d)
                runs = _kernels.stats["pipeline_runs"]
                t = time.monotonic()
                o, lse = fn(q, k, v, enable_gqa=True, return_lse=True)
                torch.cuda.synchronize()
                row[f"first_call_s_{sq}x{skv}"] = round(time.monotonic() - t, 2)
                if i > 0:
                    assert _kernels.stats["pipeline_runs"] == runs, "a new shape ran the pipeline"
                ro, rlse = reference(q, k, v, mods, 1 / math.sqrt(d))
                d_o, d_lse = compare(o, lse, ro, rlse)
                row[f"max_abs_dO_{sq}x{skv}"] = d_o
                row[f"max_abs_dLSE_{sq}x{skv}"] = d_lse
                assert d_o < 3e-2 and d_lse < 3e-2, f"{sq}x{skv}: |dO| {d_o:.2e} |dLSE| {d_lse:.2e}"
            row["ok"] = True
        except Exception as e:  # noqa: BLE001
            row["ok"] = False
            row["error"] = f"{type(e).__name__}: {e}"
            traceback.print_exc()
            ok = False
        report.setdefault("numerics", []).append(row)
        print(f"numerics {name:40s} {'ok' if row['ok'] else 'FAILED: ' + row['error'][:300]}", flush=True)
    return ok


def check_graph(report):
    fn = cubridge.compile(mask_mod=causal, score_mod=learned_alibi)
    q, k, v = rand(1, 8, 512, 128), rand(1, 2, 512, 128), rand(1, 2, 512, 128)
    fn(q, k, v, enable_gqa=True)  # the geometry's plan, outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(q, k, v, enable_gqa=True)
    q.copy_(rand(1, 8, 512, 128))
    SLOPES.mul_(2.0)  # a captured tensor updated in place: the replay reads it
    graph.replay()
    want = fn(q, k, v, enable_gqa=True)
    SLOPES.div_(2.0)
    torch.cuda.synchronize()
    diff = (out.float() - want.float()).abs().max().item()
    report["graph"] = {"max_abs_diff_replay_vs_eager": diff}
    print(f"graph    capture + replay, |replay - eager| {diff:.1e}", flush=True)
    return diff == 0.0


class Block(torch.nn.Module):
    """Pre-norm attention + MLP, GQA, a document mask and learned per-head ALiBi slopes."""

    def __init__(self, attend, dim=2048, hq=16, hkv=4, d=128):
        super().__init__()
        self.hq, self.hkv, self.d = hq, hkv, d
        self.norm1, self.norm2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, (hq + 2 * hkv) * d, bias=False)
        self.out = torch.nn.Linear(hq * d, dim, bias=False)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(),
                                       torch.nn.Linear(4 * dim, dim))
        self.slopes = torch.nn.Parameter(-torch.logspace(-3, 0, hq, base=2))
        self.attend = attend

    def forward(self, x, doc):
        bsz, s, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).split([self.hq * self.d, self.hkv * self.d,
                                                  self.hkv * self.d], dim=-1)
        q = q.view(bsz, s, self.hq, self.d).transpose(1, 2)
        k = k.view(bsz, s, self.hkv, self.d).transpose(1, 2)
        v = v.view(bsz, s, self.hkv, self.d).transpose(1, 2)
        slopes = self.slopes

        def mask_mod(b, h, q_idx, kv_idx):
            return (doc[q_idx] == doc[kv_idx]) & (q_idx >= kv_idx)

        def score_mod(score, b, h, q_idx, kv_idx):
            return score + slopes[h] * (kv_idx - q_idx)

        a = self.attend(q, k, v, score_mod=score_mod, mask_mod=mask_mod, enable_gqa=True)
        x = x + self.out(a.transpose(1, 2).reshape(bsz, s, self.hq * self.d))
        return x + self.mlp(self.norm2(x))


def timed(fn, reps=20):
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def check_block(report):
    flex = torch.compile(flex_attention, dynamic=False)
    ours = Block(cubridge.attention).to(DEV, torch.bfloat16).eval()
    theirs = Block(flex).to(DEV, torch.bfloat16).eval()
    theirs.load_state_dict(ours.state_dict())
    x = rand(4, 4096, 2048)
    doc = doc_ids(4096)
    with torch.no_grad():
        a, b = ours(x, doc), theirs(x, doc)
        diff = (a.float() - b.float()).abs().max().item()
        t_ours = timed(lambda: ours(x, doc))
        t_flex = timed(lambda: theirs(x, doc))
    report["block"] = {"max_abs_diff": diff, "cubridge_ms": t_ours, "flex_ms": t_flex,
                       "shape": "B=4 S=4096 dim=2048 Hq=16 Hkv=4 d=128 bf16"}
    print(f"block    |cubridge - flex| {diff:.2e}; {t_ours:.3f} ms vs flex {t_flex:.3f} ms "
          f"({t_flex / t_ours:.2f}x)", flush=True)
    return diff < 0.1


def check_process(report):
    code = ("import sys, time; sys.path.insert(0, %r); import torch; import gpu_check as g, cubridge\n"
            "q, k = g.rand(1, 8, 300, 128), g.rand(1, 2, 300, 128)\n"
            "t = time.monotonic(); o = cubridge.attention(q, k, k, mask_mod=g.causal, "
            "score_mod=g.learned_alibi, enable_gqa=True); torch.cuda.synchronize()\n"
            "print(round(time.monotonic() - t, 3), cubridge.stats['pipeline_runs'])" % HERE)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ), check=True).stdout.split()
    report["process"] = {"first_call_s": float(out[0]), "pipeline_runs": int(out[1])}
    print(f"process  first call in a new process {out[0]} s, pipeline runs {out[1]}", flush=True)
    return out[1] == "0"


def check_backward(report):
    q = rand(1, 8, 128, 128).requires_grad_()
    k = rand(1, 2, 128, 128)
    out = cubridge.attention(q, k, k, mask_mod=causal, enable_gqa=True)
    try:
        out.sum().backward()
    except RuntimeError as e:
        report["backward"] = str(e).splitlines()[0]
        print(f"backward {report['backward'][:120]}", flush=True)
        return "backward is not available yet" in str(e)
    return False


def check_compile(report):
    fn = cubridge.compile(mask_mod=causal, score_mod=learned_alibi)

    class M(torch.nn.Module):
        def forward(self, q, k, v):
            return fn(q, k, v, enable_gqa=True) * 2

    q, k = rand(1, 8, 256, 128), rand(1, 2, 256, 128)
    want = M()(q, k, k)
    try:
        got = torch.compile(M(), fullgraph=True)(q, k, k)
    except Exception as e:  # noqa: BLE001
        report["compile"] = f"{type(e).__name__}: {str(e)[:2000]}"
        print(f"compile  FAILED: {report['compile'][:300]}", flush=True)
        return False
    diff = (got.float() - want.float()).abs().max().item()
    report["compile"] = {"max_abs_diff": diff}
    print(f"compile  fullgraph ok, |compiled - eager| {diff:.1e}", flush=True)
    return diff == 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="torch_gpu.json")
    ap.add_argument("--only", default="numerics,graph,block,process,backward,compile")
    args = ap.parse_args()
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "adapt_args": os.environ.get("CUBRIDGE_ADAPT_ARGS", "")}
    ok = True
    for name in args.only.split(","):
        try:
            passed = globals()["check_" + name](report)
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            report[name + "_error"] = f"{type(e).__name__}: {e}"
            passed = False
        report[name + "_passed"] = passed
        ok = ok and passed
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
