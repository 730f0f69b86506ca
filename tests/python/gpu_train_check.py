"""Training with CuBridge kernels on a GPU (issue 29): run on the device, from the repository
root, after building cubridge_torch and cubridge-cli.

    PYTHONPATH=build-dev/python python3 tests/python/gpu_train_check.py --out $OUT/train.json

  grads     loss.backward() through cubridge.attention for variants of each class (masks with
            ranges, a document mask, softcap, learnable ALiBi slopes and the same slopes as a
            constant (the op's module without gradient hooks), a learnable T5 bias table; GQA), at ragged shapes (seqlen_q != seqlen_kv, tails), fresh random inputs: dQ, dK,
            dV and the captured tensors' gradients against the float64 autograd of the same
            functions applied densely (the CPU verifier's rule: |err| <= 2e-2 max|want| +
            2e-2 |want| for bf16; a captured tensor's gradient, a sum over scores, by relative L2)
  compile   the same backward under torch.compile(fullgraph=True): gradients equal eager's
  deterministic  under torch.use_deterministic_algorithms(True), two backward runs give the same
            bits (dQ, dK, dV, learnable slopes; GQA, S=1000)
  train     a small causal transformer (2 layers, 4 heads of 64, learnable ALiBi slopes and a
            softcap) trained for 60 steps with cubridge.attention, and the same model, same
            initialisation and batches, with flex_attention (torch.compile); the loss curves must
            agree within 2% at every step, and the slopes must have learned alike
One line per check; the JSON has the figures. Exit 1 when a check fails, 77 without a GPU."""

import argparse
import json
import math
import sys
import tempfile
import os
import time
import traceback

import torch

if not torch.cuda.is_available():
    print("gpu_train_check: no CUDA GPU here: skipped")
    sys.exit(77)

os.environ.setdefault("CUBRIDGE_TORCH_CACHE", tempfile.mkdtemp(prefix="cubridge-train-check-"))

import cubridge  # noqa: E402
from torch.nn.attention.flex_attention import create_block_mask, flex_attention  # noqa: E402

DEV = "cuda"
G = torch.Generator(device=DEV).manual_seed(29)


def rand(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape, device=DEV, generator=G).to(dtype)


def indices(q, k):
    """b, h, q_idx, kv_idx as broadcast index tensors over [batch, heads_q, seqlen_q, seqlen_kv]."""
    return (torch.arange(q.size(0), device=q.device).view(-1, 1, 1, 1),
            torch.arange(q.size(1), device=q.device).view(1, -1, 1, 1),
            torch.arange(q.size(2), device=q.device).view(1, 1, -1, 1),
            torch.arange(k.size(2), device=q.device).view(1, 1, 1, -1))


def probabilities(q, k, v, score_mod, mask_mod, scale):
    """P as the functions define it, densely, in q's dtype (float64 for the reference), and V
    repeated over each KV head's query group; a fully masked row gives 0, as in Flex."""
    hq, hkv = q.size(1), k.size(1)
    k, v = k.repeat_interleave(hq // hkv, 1), v.repeat_interleave(hq // hkv, 1)
    s = q @ k.transpose(-1, -2) * scale
    b, h, qi, ki = indices(q, k)
    if score_mod is not None:
        s = score_mod(s, b, h, qi, ki)
    if mask_mod is not None:
        s = s.masked_fill(~mask_mod(b, h, qi, ki).expand_as(s), float("-inf"))
    return torch.softmax(s, -1).nan_to_num(0.0), v


def dense(q, k, v, score_mod, mask_mod, scale):
    """Attention as the functions define it (probabilities), densely."""
    p, vr = probabilities(q, k, v, score_mod, mask_mod, scale)
    return p @ vr


# ---- variants as users write them ------------------------------------------------------------
def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def window(w):
    return lambda b, h, q_idx, kv_idx: (q_idx - kv_idx).abs() <= w


def documents(doc):
    def mask_mod(b, h, q_idx, kv_idx):
        return (doc[q_idx] == doc[kv_idx]) & (q_idx >= kv_idx)
    return mask_mod


def softcap(cap):
    def score_mod(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap)
    return score_mod


def alibi(slopes):
    def score_mod(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (kv_idx - q_idx)
    return score_mod


def alibi_abs(slopes):
    def score_mod(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (kv_idx - q_idx).abs()
    return score_mod


def t5(table):
    def score_mod(score, b, h, q_idx, kv_idx):
        return score + table[h, torch.clamp(kv_idx - q_idx, -15, 15) + 15]
    return score_mod


def doc_ids(n):
    cuts = sorted(torch.randperm(n - 1, generator=torch.Generator().manual_seed(n))[:3].tolist())
    ids = torch.zeros(n, dtype=torch.int32)
    for c in cuts:
        ids[c + 1:] += 1
    return ids.to(DEV)


def compare(name, got, want, report, mass=None):
    """|got - want| <= 2e-2 * scale + 2e-2 * |want| (bf16; the CPU verifier's rule,
    pipeline/verify_backward.h): scale = max|want| for dQ, dK, dV; for a captured tensor's
    gradient, a sum over scores of dS * d score / d element, each element's error scale `mass`,
    sum P (|dP| + sum_d |dO O|) |d score / d element| (D = rowsum(dO O) is taken from the stored
    bf16 O, as every FlashAttention-style backward does: its error does not cancel in the sum)."""
    got, want = got.double(), want.double()
    err = (got - want).abs()
    scale = want.abs().max().item()
    bound = 2e-2 * (mass if mass is not None else max(scale, 1e-30)) + 2e-2 * want.abs()
    ok = bool((err <= bound).all()) and bool(torch.isfinite(got).all())
    report[name] = {"max_abs": err.max().item(), "max_abs_want": scale,
                    "rel_l2": (err.norm() / want.norm().clamp_min(1e-30)).item(),
                    "worst_err_over_bound": (err / bound).max().item(), "passed": ok}
    return ok


def buffer_masses(q, k, v, do, score_mod, mask_mod, abs_mod, learn, scale):
    """Each learnable tensor's per-element error scale (compare): the weights
    P (|dP| + sum_d |dO O|) summed through |d score / d element|, which `abs_mod` (the score_mod
    with each partial's absolute value) gives by autograd, in float64."""
    with torch.no_grad():
        p, vr = probabilities(q, k, v, score_mod, mask_mod, scale)
        o = p @ vr
        weight = p * ((do @ vr.transpose(-1, -2)).abs() + (do * o).abs().sum(-1, keepdim=True))
    b, h, qi, ki = indices(q, k)
    copies = [t.detach().clone().requires_grad_() for t in learn]
    terms = abs_mod(*copies)(torch.zeros_like(weight), b, h, qi, ki)
    return torch.autograd.grad((weight * terms).sum(), copies)


def check_grads(report):
    ok_all = True
    cases = []
    # Every class at GQA d128 (seqlen_q == seqlen_kv with tails, then both ways unequal); two at
    # MHA d64. Each (variant, heads, head dim) is one kernel: the shapes reuse it.
    for (b, hq, hkv, sq, skv, d), names in [
            ((2, 8, 2, 300, 300, 128), "*"), ((1, 8, 2, 257, 390, 128), "*"),
            ((1, 8, 2, 390, 257, 128), "*"), ((1, 4, 4, 200, 333, 64), ("causal", "alibi")),
            ((1, 4, 2, 257, 300, 256), ("causal", "alibi", "t5"))]:
        slopes = torch.linspace(-0.5, -0.01, hq, device=DEV).requires_grad_()
        table = (0.1 * torch.randn(hq, 31, device=DEV, generator=G)).requires_grad_()
        doc = doc_ids(max(sq, skv))
        # (name, score_mod, mask_mod, learnable tensors, the score_mod of those tensors with
        # each partial's absolute value, for the error scale)
        every = [
            ("causal", None, causal, [], None),
            ("window", None, window(50), [], None),
            ("documents", None, documents(doc), [], None),
            ("softcap", softcap(20.0), None, [], None),
            ("alibi", alibi(slopes), causal, [("slopes", slopes)], alibi_abs),
            # The same kernel where the slopes learn nothing: the op's module without the
            # gradient hooks (CUBRIDGE_BWD_BUFFER_GRADS=0).
            ("alibi_const", alibi(slopes.detach()), causal, [], None),
            ("t5", t5(table), None, [("table", table)], t5),
        ]
        for name, score_mod, mask_mod, learn, abs_mod in every:
            if names == "*" or name in names:
                cases.append((f"{name}_{hq}x{hkv}_{sq}x{skv}_d{d}", (b, hq, hkv, sq, skv, d),
                              score_mod, mask_mod, learn, abs_mod))
    for name, (b, hq, hkv, sq, skv, d), score_mod, mask_mod, learn, abs_mod in cases:
        r = report.setdefault(name, {})
        try:
            q = rand(b, hq, sq, d).requires_grad_()
            k = rand(b, hkv, skv, d).requires_grad_()
            v = rand(b, hkv, skv, d).requires_grad_()
            do = rand(b, hq, sq, d)
            scale = 1.0 / math.sqrt(d)
            for _, t in learn:
                t.grad = None
            o = cubridge.attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod,
                                   enable_gqa=hkv != hq)
            o.backward(do)
            got = [q.grad, k.grad, v.grad] + [t.grad for _, t in learn]
            ref_in = [t.detach().double().requires_grad_() for t in (q, k, v)]
            ref_learn = [t.detach().double().requires_grad_() for _, t in learn]
            # The reference's functions read the float64 copies of the learnable tensors.
            mods = {"slopes": alibi, "table": t5}
            ref_score = mods[learn[0][0]](ref_learn[0]) if learn else score_mod
            want_o = dense(*ref_in, ref_score, mask_mod, scale)
            want_o.backward(do.double())
            want = [t.grad for t in ref_in] + [t.grad for t in ref_learn]
            masses = buffer_masses(*ref_in, do.double(), ref_score, mask_mod, abs_mod,
                                   ref_learn, scale) if learn else []
            ok = True
            for i, (gname, g, w) in enumerate(zip(["dq", "dk", "dv"] + [n for n, _ in learn],
                                                  got, want)):
                if g is None:
                    r[gname] = {"passed": False, "error": "no gradient"}
                    ok = False
                    continue
                ok = compare(gname, g, w, r, masses[i - 3] if i >= 3 else None) and ok
            r["passed"] = ok
        except Exception as e:  # noqa: BLE001  (reported per case)
            r.update(passed=False, error=traceback.format_exc())
            ok = False
        ok_all = ok_all and ok
        worst = max((v["worst_err_over_bound"] for v in r.values()
                     if isinstance(v, dict) and "worst_err_over_bound" in v), default=float("nan"))
        print(f"grads    {name:34s} {'ok' if ok else 'FAILED'}  worst error / bound {worst:.2f}"
              + ("" if ok else f"  {json.dumps(r)[:600]}"), flush=True)
    return ok_all


def check_compile(report):
    slopes = torch.linspace(-0.5, -0.01, 8, device=DEV).requires_grad_()

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (kv_idx - q_idx)

    fn = cubridge.compile(score_mod=score_mod, mask_mod=causal)

    def step(q, k, v):
        return (fn(q, k, v, enable_gqa=True).float() ** 2).sum()

    q = rand(2, 8, 300, 128).requires_grad_()
    k = rand(2, 2, 300, 128).requires_grad_()
    v = rand(2, 2, 300, 128).requires_grad_()
    step(q, k, v).backward()
    eager = [t.grad.clone() for t in (q, k, v, slopes)]
    for t in (q, k, v, slopes):
        t.grad = None
    compiled = torch.compile(step, fullgraph=True)
    compiled(q, k, v).backward()
    got = [t.grad for t in (q, k, v, slopes)]
    # The fast mode adds dQ and the slopes' gradient with float atomics, whose order varies from
    # run to run: equal up to that.
    diffs = [(a.float() - b.float()).abs().max().item() for a, b in zip(got, eager)]
    bounds = [1e-3 * b.float().abs().max().item() for b in eager]
    ok = all(d <= bd for d, bd in zip(diffs, bounds))
    report["compile"] = {"max_abs_diff_vs_eager": diffs, "bounds": bounds, "passed": ok}
    print(f"compile  fullgraph backward vs eager: max |diff| {diffs} (bounds {bounds}) "
          f"{'ok' if ok else 'FAILED'}", flush=True)
    return ok


def check_deterministic(report):
    """torch.use_deterministic_algorithms(True): two backward runs give the same bits (dQ, dK,
    dV, the slopes' gradient); the fast mode agrees with them up to float atomics' rounding."""
    slopes = torch.linspace(-0.5, -0.01, 8, device=DEV).requires_grad_()
    q = rand(2, 8, 1000, 128).requires_grad_()
    k = rand(2, 2, 1000, 128).requires_grad_()
    v = rand(2, 2, 1000, 128).requires_grad_()
    do = rand(2, 8, 1000, 128)

    def grads():
        for t in (q, k, v, slopes):
            t.grad = None
        cubridge.attention(q, k, v, score_mod=alibi(slopes), mask_mod=causal,
                           enable_gqa=True).backward(do)
        return [t.grad.clone() for t in (q, k, v, slopes)]

    fast = [grads(), grads()]
    torch.use_deterministic_algorithms(True)
    try:
        det = [grads(), grads()]
    finally:
        torch.use_deterministic_algorithms(False)
    same = [bool(torch.equal(a, b)) for a, b in zip(*det)]
    fast_same = [bool(torch.equal(a, b)) for a, b in zip(*fast)]
    close = [(a.float() - b.float()).abs().max().item() / b.float().abs().max().item()
             for a, b in zip(fast[0], det[0])]
    ok = all(same) and max(close) < 1e-2
    report["deterministic"] = {"bitwise_equal": same, "fast_mode_bitwise_equal": fast_same,
                               "fast_vs_deterministic_rel": close, "passed": ok}
    print(f"determ.  deterministic runs bitwise equal {same}; fast runs {fast_same}; fast vs "
          f"deterministic max rel {max(close):.1e}: {'ok' if ok else 'FAILED'}", flush=True)
    return ok


class Block(torch.nn.Module):
    def __init__(self, dim, heads, attend):
        super().__init__()
        self.heads, self.attend = heads, attend
        self.norm1, self.norm2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.qkv, self.proj = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(),
                                       torch.nn.Linear(4 * dim, dim))
        self.slopes = torch.nn.Parameter(-torch.logspace(-2, -0.5, heads))

    def forward(self, x):
        b, s, dim = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        o = self.attend(self, q.bfloat16(), k.bfloat16(), v.bfloat16())
        x = x + self.proj(o.float().transpose(1, 2).reshape(b, s, dim))
        return x + self.mlp(self.norm2(x))


class Model(torch.nn.Module):
    def __init__(self, attend, vocab=256, dim=256, heads=4, layers=2):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.blocks = torch.nn.ModuleList([Block(dim, heads, attend) for _ in range(layers)])
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, tokens):
        x = self.embed(tokens)
        for blk in self.blocks:
            x = blk(x)
        return self.head(x)


def cubridge_attend(blk, q, k, v):
    # As a user writes it: the score_mod reads the block's parameter (self.slopes).
    def score_mod(score, b, h, q_idx, kv_idx):
        return 30.0 * torch.tanh((score + blk.slopes[h] * (kv_idx - q_idx)) / 30.0)
    return cubridge.attention(q, k, v, score_mod=score_mod, mask_mod=causal)


_flex = torch.compile(flex_attention)
_masks = {}
FLEX_DENSE = False  # set when Flex refuses the slopes' gradient: the dense eager model instead


def flex_attend(blk, q, k, v):
    def score_mod(score, b, h, q_idx, kv_idx):
        return 30.0 * torch.tanh((score + blk.slopes[h] * (kv_idx - q_idx)) / 30.0)
    if FLEX_DENSE:
        return dense(q, k, v, score_mod, causal, 1.0 / math.sqrt(q.size(-1)))
    s = q.size(2)
    if s not in _masks:
        _masks[s] = create_block_mask(causal, None, None, s, s, device=DEV)
    return _flex(q, k, v, score_mod=score_mod, block_mask=_masks[s])


def batches(steps, batch, seqlen, vocab):
    """A learnable synthetic language: each next token is a fixed function of the current one
    with probability 0.8, else random."""
    g = torch.Generator(device=DEV).manual_seed(1)
    follow = torch.randperm(vocab, device=DEV, generator=g)
    for _ in range(steps):
        t = torch.randint(0, vocab, (batch, seqlen + 1), device=DEV, generator=g)
        keep = torch.rand(batch, seqlen, device=DEV, generator=g) < 0.8
        for i in range(1, seqlen + 1):
            t[:, i] = torch.where(keep[:, i - 1], follow[t[:, i - 1]], t[:, i])
        yield t[:, :-1], t[:, 1:]


def train(attend, steps, label):
    torch.manual_seed(0)
    model = Model(attend).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    start = time.monotonic()
    for x, y in batches(steps, 8, 256, 256):
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    slopes = [blk.slopes.detach().cpu().tolist() for blk in model.blocks]
    print(f"train    {label}: loss {losses[0]:.3f} -> {losses[-1]:.3f} in {steps} steps, "
          f"{time.monotonic() - start:.1f} s", flush=True)
    return losses, slopes


def check_train(report, steps=60):
    ours, our_slopes = train(cubridge_attend, steps, "cubridge.attention")
    try:
        theirs, their_slopes = train(flex_attend, steps, "flex_attention")
        reference = "flex_attention (torch.compile)"
    except Exception as e:  # noqa: BLE001  Flex refusing the slopes' gradient: dense eager
        global FLEX_DENSE
        FLEX_DENSE = True
        report["train_flex_error"] = str(e).splitlines()[0][:300]
        print(f"train    flex_attention refused ({report['train_flex_error'][:120]}); "
              "comparing with dense eager attention", flush=True)
        theirs, their_slopes = train(flex_attend, steps, "dense eager attention")
        reference = "dense eager attention"
    rel = [abs(a - b) / b for a, b in zip(ours, theirs)]
    initial = (-torch.logspace(-2, -0.5, 4)).tolist()
    slope_diff = max(abs(a - b) for la, lb in zip(our_slopes, their_slopes) for a, b in zip(la, lb))
    slope_moved = max(abs(a - b) for la in our_slopes for a, b in zip(la, initial))
    ok = max(rel) < 0.02 and ours[-1] < 0.8 * ours[0] and slope_diff < 0.25 * slope_moved
    report["train"] = {"reference": reference, "losses": ours, "reference_losses": theirs,
                       "max_rel_loss_diff": max(rel), "slopes": our_slopes,
                       "reference_slopes": their_slopes, "max_slope_diff": slope_diff,
                       "max_slope_change": slope_moved, "passed": ok}
    print(f"train    vs {reference}: max relative loss difference {max(rel):.2e}, slopes moved "
          f"{slope_moved:.3f}, differ by {slope_diff:.3f}: {'ok' if ok else 'FAILED'}", flush=True)
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="")
    ap.add_argument("--only", default="grads,compile,deterministic,train")
    args = ap.parse_args()
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    ok = True
    for check in args.only.split(","):
        try:
            ok = {"grads": check_grads, "compile": check_compile,
                  "deterministic": check_deterministic, "train": check_train}[check](report) and ok
        except Exception:  # noqa: BLE001
            report[check + "_error"] = traceback.format_exc()
            print(f"{check}  FAILED\n{traceback.format_exc()}", flush=True)
            ok = False
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
