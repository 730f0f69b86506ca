"""Builds one lowered kernel (NAME_sm_90.cu from bench/make_kernels.sh) with nvcc and launches it
twice at S, 16k tokens, HQ / HKV heads (Llama2-7B's 32/32 unless given), bf16, head dim D: a
target for ncu (bench/sm90/sample.sh and throughput.sh profile the second launch).
    python3 bench/sm90/launch_lowered.py KERNEL.cu S [D [HQ HKV]] [--suite NAME]
--suite NAME: a kernel of CUBRIDGE_SUITE=NAME bash bench/make_kernels.sh, launched with its captured
tensors as the matrix builds them (bench/suite.py; NAME.report.json beside the kernel, seed 1234)."""
import math, os, subprocess, sys

suite_name = None
if "--suite" in sys.argv:
    at = sys.argv.index("--suite")
    suite_name = sys.argv[at + 1]
    del sys.argv[at:at + 2]
src, s = sys.argv[1], int(sys.argv[2])
d = int(sys.argv[3]) if len(sys.argv) > 3 else 128
hq, hkv = (int(sys.argv[4]), int(sys.argv[5])) if len(sys.argv) > 5 else (32, 32)
sys.argv = [sys.argv[0], "."]  # check.py reads its own argv at import
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lowered"))
import torch  # noqa: E402
import check  # noqa: E402

so = os.path.join("/tmp", os.path.basename(src).replace(".cu", ".so"))
subprocess.run(["nvcc", "-shared", "-Xcompiler", "-fPIC", "-std=c++17", *check.arch_flags("sm_90"), "-O3",
                "-lineinfo", "-o", so, src], check=True)
lib = check.load(so)
b = 16384 // s
q = torch.randn(b, hq, s, d, device="cuda", dtype=torch.bfloat16)
k, v = (torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
o, lse = torch.empty_like(q), torch.empty(b, hq, s, device="cuda")
if suite_name:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import suite as suites  # noqa: E402  bench/suite.py
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    kdir, kname = os.path.dirname(os.path.abspath(src)), os.path.basename(src)[:-len("_sm_90.cu")]
    sw = suites.Suite(root, suite_name)
    slots, tensors = sw.bench_tensors(kdir, kname, kname, b, hq, hkv, s, sw.params(kname), "cuda")
    bufs = [tensors[n] for n, _, _ in slots]
else:
    # The document masks' one buffer, as the matrix fills it.
    with open(src) as f:
        bufs = [check.bench_documents(s).cuda()] if "// buffer doc: int" in f.read() else []
for _ in range(2):
    err, _, _ = check.run(lib, q, k, v, o, lse, 1 / math.sqrt(d), bufs, 0)
sys.exit(err)
