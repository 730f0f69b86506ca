"""The Python package on the CPU (python3-torch 1.13): source to spec, captures, errors, the
local pipeline behind cubridge.compile / cubridge.attention, and the op library's checks. The
numerics run on a GPU (tests/python/gpu_check.py)."""

import atexit
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
# Hermetic: the package's kernel folders and the CLI's own cache in fresh folders, removed at exit
# (subprocesses of the tests inherit them).
for _var in ("CUBRIDGE_TORCH_CACHE", "CUBRIDGE_CACHE_DIR"):
    if _var not in os.environ:
        os.environ[_var] = tempfile.mkdtemp(prefix="cubridge-test-")
        atexit.register(shutil.rmtree, os.environ[_var], True)

import cubridge  # noqa: E402
import local_cluster  # noqa: E402
import variants  # noqa: E402
from cubridge import _kernels  # noqa: E402


def qkv(b=1, hq=4, hkv=4, s=40, d=64, dtype=torch.bfloat16, device="cpu"):
    g = torch.Generator().manual_seed(0)
    return tuple(torch.randn(b, h, s, d, generator=g).to(dtype).to(device)
                 for h in (hq, hkv, hkv))


def load_example(name):
    path = os.path.join(ROOT, "examples", "specs", name + ".py")
    module_spec = importlib.util.spec_from_file_location("example_" + name.replace("/", "_"), path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def line_of(text, fn=variants):
    with open(fn.__file__) as f:
        return next(i for i, line in enumerate(f, 1) if text in line)


class SpecFromFunctions(unittest.TestCase):
    def test_closure_scalar_becomes_a_parameter_and_positional_names_the_frontends(self):
        spec = cubridge.build_spec(mask_mod=variants.sliding(7))
        self.assertIn("def mask_mod(b, h, q_idx, kv_idx, window: int=7):", spec.text)
        self.assertIn("return (q_idx - kv_idx).abs() <= window", spec.text)
        self.assertEqual(spec.buffers, {})

    def test_global_tensor_becomes_a_buffer_after_the_positional_arguments(self):
        spec = cubridge.build_spec(score_mod=variants.learned_alibi, mask_mod=variants.causal)
        self.assertIn("def score_mod(score, b, h, q_idx, kv_idx, SLOPES):", spec.text)
        self.assertIn("return score + SLOPES[h] * (kv_idx - q_idx)", spec.text)
        self.assertIn("def mask_mod(b, h, q_idx, kv_idx):", spec.text)
        self.assertIs(spec.buffers["SLOPES"], variants.SLOPES)

    def test_helpers_are_copied_and_modules_imported(self):
        table = torch.randn(4, 7)
        spec = cubridge.build_spec(score_mod=variants.make_table_bias(table))
        self.assertIn("import torch", spec.text)
        self.assertIn("def bucket(rel, n: int):", spec.text)
        self.assertIn("table[h, bucket(kv_idx - q_idx, 3)]", spec.text)
        self.assertIs(spec.buffers["table"], table)

    def test_attribute_of_a_captured_object_is_a_buffer(self):
        model = variants.Model()
        spec = cubridge.build_spec(score_mod=model.score_mod())
        self.assertIn("score * 0.5 + self_bias[h]", spec.text)
        self.assertIs(spec.buffers["self_bias"], model.bias)

    def test_lambda_becomes_a_def(self):
        spec = cubridge.build_spec(mask_mod=variants.padding)
        self.assertIn("def mask_mod(b, h, q_idx, kv_idx, lengths):", spec.text)
        self.assertIn("return kv_idx < lengths[b]", spec.text)

    def test_a_helper_called_by_a_roles_name_is_renamed(self):
        t5 = load_example("generality/t5_relative_buckets")
        score_mod = t5.score_mod
        table = torch.randn(4, 32)
        spec = cubridge.build_spec(
            score_mod=lambda score, b, h, q_idx, kv_idx: score_mod(score, b, h, q_idx, kv_idx, table))
        self.assertIn("def score_mod_fn(score, b, h, q_idx, kv_idx, table, num_buckets", spec.text)
        self.assertIn("return score_mod_fn(score, b, h, q_idx, kv_idx, table)", spec.text)

    def test_reserved_names_are_renamed(self):
        k = torch.ones(4)
        spec = cubridge.build_spec(score_mod=lambda score, b, h, q_idx, kv_idx: score * k[h])
        self.assertIn("k_[h]", spec.text)
        self.assertIn("k_", spec.buffers)

    def test_a_capture_it_cannot_take_says_which_and_what_to_pass(self):
        with self.assertRaisesRegex(cubridge.SpecError, r"variants\.py:\d+: captures `ids`, a list; "
                                    "CuBridge takes tensors, ints, floats and bools"):
            cubridge.build_spec(mask_mod=variants.captures_a_list())

    def test_a_capture_past_the_buffer_limit_is_refused_before_it_is_written(self):
        # A full [B, H, S, S] bias at S = 8k: 2^32 elements, an expanded view (no memory here).
        bias = torch.zeros(1, dtype=torch.bfloat16).expand(2, 32, 8192, 8192)
        with self.assertRaisesRegex(cubridge.SpecError, r"captures `bias`, a tensor of shape "
                                    r"\(2, 32, 8192, 8192\) \(4294967296 elements\); a captured "
                                    "tensor holds at most 2\^31 elements"):
            def score_mod(score, b, h, q_idx, kv_idx):
                return score + bias[b, h, q_idx, kv_idx]
            cubridge.build_spec(score_mod=score_mod)

    def test_wrong_arity_names_the_expected_signature(self):
        with self.assertRaisesRegex(cubridge.SpecError, r"mask_mod takes \(b, h, q_idx, kv_idx\)"):
            cubridge.build_spec(mask_mod=lambda b, h: b)

    def test_a_spec_files_function_bound_in_a_closure_is_a_helper(self):
        t5 = load_example("generality/t5_relative_buckets")
        table = torch.randn(4, 32)
        spec = cubridge.build_spec(score_mod=variants.bind_score(t5.score_mod, table))
        self.assertIn("def t5_bucket(rel, num_buckets: int, max_distance: int):", spec.text)
        # Named as the wrapper calls it (`fn`), its own defaults kept.
        self.assertIn("def fn(score, b, h, q_idx, kv_idx, table, num_buckets: int=32, "
                      "max_distance: int=128):", spec.text)
        self.assertIn("def score_mod(score, b, h, q_idx, kv_idx, x0):\n"
                      "    return fn(score, b, h, q_idx, kv_idx, x0)", spec.text)
        self.assertIs(spec.buffers["x0"], table)

    def test_a_tensor_annotation_is_dropped_not_captured(self):
        # causal_document.py annotates `doc: Tensor` (from torch import Tensor): an annotation,
        # not a value the function reads; unannotated, the frontend takes it as a tensor.
        docs = load_example("causal_document")
        ids = torch.tensor([0, 0, 1, 1, 1], dtype=torch.int32)
        spec = cubridge.build_spec(mask_mod=variants.bind_mask(docs.mask_mod, ids))
        self.assertIn("def fn(b, h, q_idx, kv_idx, doc):", spec.text)
        self.assertNotIn("Tensor", spec.text)
        self.assertEqual(list(spec.buffers), ["x0"])

    def test_spec_positions_map_to_the_users_file(self):
        spec = cubridge.build_spec(score_mod=variants.learned_alibi)
        line = next(i for i, l in enumerate(spec.text.splitlines(), 1) if "return" in l)
        where = spec.user_location(line, 5)
        self.assertEqual(where[0], variants.__file__)
        self.assertEqual(where[1], line_of("return score + SLOPES[h] * (kv - q)"))


class LocalPipeline(unittest.TestCase):
    """The real cubridge-cli adapt --local behind the package (CPU: transfer, CPU verification,
    lowering), its folders on disk and the in-process table."""

    def test_a_variant_is_adapted_once_then_looked_up(self):
        q, k, v = qkv(hq=4, hkv=2)
        fn = cubridge.compile(score_mod=variants.learned_alibi, mask_mod=variants.causal)
        runs = _kernels.stats["pipeline_runs"]
        kernel, buffers, scale = fn.kernel(q, k, v, enable_gqa=True, arch="sm_90")
        self.assertEqual(_kernels.stats["pipeline_runs"], runs + 1)
        self.assertEqual(kernel.arch, "sm_90")
        self.assertEqual(kernel.buffer_names, ["SLOPES"])
        self.assertIs(buffers[0], variants.SLOPES)
        self.assertAlmostEqual(scale, 64 ** -0.5)
        self.assertTrue(os.path.exists(os.path.join(kernel.folder, "kernel.cu")))
        # Another shape, another Compiled of the same functions: no pipeline run.
        q2, k2, v2 = qkv(b=2, hq=4, hkv=2, s=77)
        again, _, _ = cubridge.compile(score_mod=variants.learned_alibi,
                                       mask_mod=variants.causal).kernel(q2, k2, v2, enable_gqa=True,
                                                                        arch="sm_90")
        self.assertEqual(again.folder, kernel.folder)
        self.assertEqual(_kernels.stats["pipeline_runs"], runs + 1)
        # A new process finds the folder on disk and runs nothing.
        code = ("import sys; sys.path.insert(0, %r); import torch, cubridge, variants\n"
                "q = torch.zeros(1, 4, 9, 64, dtype=torch.bfloat16); k = torch.zeros(1, 2, 9, 64, dtype=torch.bfloat16)\n"
                "kn, _, _ = cubridge.compile(score_mod=variants.learned_alibi, mask_mod=variants.causal)"
                ".kernel(q, k, k, enable_gqa=True, arch='sm_90')\n"
                "print(kn.folder, cubridge.stats['pipeline_runs'], cubridge.stats['disk_hits'])" % HERE)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=dict(os.environ), check=True).stdout.split()
        self.assertEqual(out, [kernel.folder, "0", "1"])

    def test_a_spec_files_function_bound_in_a_closure_adapts(self):
        # Helpers that take tensors as arguments pass the frontend, the rules and the verifier.
        t5 = load_example("generality/t5_relative_buckets")
        q, k, v = qkv(hq=4, hkv=2, s=70)
        table = torch.randn(4, 32)
        kernel, buffers, _ = cubridge.compile(score_mod=variants.bind_score(t5.score_mod, table)) \
            .kernel(q, k, v, enable_gqa=True, arch="sm_90")
        self.assertEqual(kernel.buffer_names, ["x0"])
        self.assertIs(buffers[0], table)

    def test_a_tensor_annotated_spec_function_adapts(self):
        docs = load_example("causal_document")
        q, k, v = qkv(s=70)
        ids = (torch.arange(70) // 20).to(torch.int32)
        kernel, buffers, _ = cubridge.compile(mask_mod=variants.bind_mask(docs.mask_mod, ids)) \
            .kernel(q, k, v, arch="sm_80")
        self.assertEqual(kernel.buffer_names, ["x0"])
        self.assertIs(buffers[0], ids)

    def test_a_kernel_made_for_other_names_is_bound_to_these_tensors(self):
        # The same math under other names has the same spec hash: the CLI's cache serves the
        # kernel made for the first functions, and its report names the tensors as the second
        # spec does (a KeyError here before).
        q, k, v = qkv(hq=4, hkv=2)
        slopes, offsets, w, shift = (torch.randn(4) for _ in range(4))

        def first(score, b, h, q_idx, kv_idx):
            return score + slopes[h] * (kv_idx - q_idx) + offsets[h]

        def second(score, b, h, q_idx, kv_idx):
            return score + w[h] * (kv_idx - q_idx) + shift[h]

        a, _, _ = cubridge.compile(score_mod=first).kernel(q, k, v, enable_gqa=True, arch="sm_90")
        b, tensors, _ = cubridge.compile(score_mod=second).kernel(q, k, v, enable_gqa=True,
                                                                  arch="sm_90")
        self.assertEqual(a.buffer_names, ["slopes", "offsets"])
        self.assertEqual(b.spec_hash, a.spec_hash)
        self.assertTrue(b.report["cache_hit"])
        self.assertEqual(b.buffer_names, ["w", "shift"])
        self.assertIs(tensors[0], w)
        self.assertIs(tensors[1], shift)

    def test_python_precedence_of_invert_survives_into_the_spec(self):
        # ast.unparse drops the parentheses of `(~kv_idx) & 127`; TorchScript, which reads the
        # spec, would take `~kv_idx & 127` as `~(kv_idx & 127)` (the frontend refuses it).
        def mask(b, h, q_idx, kv_idx):
            return ((~kv_idx) & 127) < 8
        spec = cubridge.build_spec(mask_mod=mask)
        self.assertIn("(~kv_idx) & 127", spec.text)
        q, k, v = qkv()
        kernel, _, _ = cubridge.compile(mask_mod=mask).kernel(q, k, v, arch="sm_80")
        self.assertEqual(kernel.arch, "sm_80")

    def test_a_new_scalar_value_is_a_new_kernel(self):
        q, k, v = qkv()
        a, _, _ = cubridge.compile(mask_mod=variants.sliding(5)).kernel(q, k, v, arch="sm_80")
        b, _, _ = cubridge.compile(mask_mod=variants.sliding(9)).kernel(q, k, v, arch="sm_80")
        self.assertNotEqual(a.spec_hash, b.spec_hash)
        self.assertEqual(a.arch, "sm_80")

    def test_a_variant_the_frontend_refuses_points_at_the_users_line(self):
        q, k, v = qkv()
        with self.assertRaises(cubridge.CubridgeError) as e:
            cubridge.compile(score_mod=variants.not_elementwise).kernel(q, k, v, arch="sm_90")
        msg = str(e.exception)
        self.assertRegex(msg, r"%s:%d:\d+: " % (variants.__file__.replace(".", r"\."),
                                                line_of("score + torch.arange(4)")))

    def test_attention_on_cpu_tensors_adapts_then_says_the_kernel_needs_a_gpu(self):
        q, k, v = qkv()
        with self.assertRaisesRegex(ValueError, "runs on a CUDA GPU and q is on cpu"):
            cubridge.attention(q, k, v, mask_mod=variants.causal)


class ServicePath(unittest.TestCase):
    """CUBRIDGE_ADDRESS set: the kernel comes from a real local cluster (scripts/local-cluster:
    redis-server, the coordinator, a CPU worker), through cubridge-cli submit and get; a second
    machine (another kernel cache, another process) is answered from the service's cache."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="cubridge-cluster-")
        build = os.path.dirname(os.path.dirname(cubridge._paths.cli()))  # <build>/client/cubridge-cli
        cls.env, cls.service_env = local_cluster.start(cls.dir, build)

    @classmethod
    def tearDownClass(cls):
        local_cluster.stop(cls.env)
        shutil.rmtree(cls.dir, ignore_errors=True)

    def resolve_in_a_new_process(self, cache):
        code = ("import sys, time; sys.path.insert(0, %r); import torch, cubridge, variants\n"
                "q = torch.zeros(1, 4, 24, 64, dtype=torch.bfloat16)\n"
                "t = time.monotonic()\n"
                "kn, _, _ = cubridge.compile(mask_mod=variants.padding).kernel(q, q, q, arch='sm_80')\n"
                "import os; modules = sorted(f for f in os.listdir(kn.folder) if f.startswith('module.'))\n"
                "print(kn.spec_hash, kn.report['arch'], cubridge.stats['pipeline_runs'], "
                "round(time.monotonic() - t, 3), ','.join(modules) or '-')" % HERE)
        env = dict(os.environ, CUBRIDGE_TORCH_CACHE=cache, **self.service_env)
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                           timeout=600)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout.split()

    def test_the_service_adapts_once_and_serves_every_machine(self):
        first = self.resolve_in_a_new_process(os.path.join(os.environ["CUBRIDGE_TORCH_CACHE"], "a"))
        self.assertEqual(first[1:3], ["sm_80", "2"])  # submit, get
        # another machine: its own kernel folders
        second = self.resolve_in_a_new_process(os.path.join(os.environ["CUBRIDGE_TORCH_CACHE"], "b"))
        self.assertEqual(second[0], first[0])
        self.assertEqual(second[2], "2")
        # The worker's cubin came with the kernel: an A100 (sm_80) would load it, not compile it.
        self.assertEqual(second[4], "module.sm_80.cubin,module.sm_80.cubin.json")
        print(f"[ figure ] service path: first call {first[3]} s (adapted), "
              f"on another machine {second[3]} s (service cache hit)")


class OpLibrary(unittest.TestCase):
    """torch.ops.cubridge.attention's checks and shapes, against a real kernel folder."""

    @classmethod
    def setUpClass(cls):
        q, k, v = qkv(hq=4, hkv=2)
        cls.fn = cubridge.compile(score_mod=variants.learned_alibi, mask_mod=variants.causal)
        cls.kernel, _, _ = cls.fn.kernel(q, k, v, enable_gqa=True, arch="sm_90")
        cubridge._api._load_library()
        cls.op = torch.ops.cubridge.attention

    def call(self, q, k, v, buffers, scale=0.125):
        return self.op(q, k, v, buffers, scale, self.kernel.folder)

    def test_meta_gives_flex_attentions_shapes(self):
        q, k, v = qkv(b=2, hq=4, hkv=2, s=33, device="meta")
        o, lse = self.call(q, k, v, [torch.empty(4, device="meta")])
        self.assertEqual(tuple(o.shape), (2, 4, 33, 64))
        self.assertEqual(o.dtype, torch.bfloat16)
        self.assertEqual(tuple(lse.shape), (2, 4, 33))
        self.assertEqual(lse.dtype, torch.float32)

    def test_backward_gives_meta_gradients_with_the_inputs_shapes(self):
        # The folder has the backward kernel (kernel_bwd.cu); on Meta tensors its op gives the
        # gradients' shapes, as torch.compile's fake tensors need: dQ, dK, dV and the slopes'.
        q, k, v = qkv(b=2, hq=4, hkv=2, s=33, device="meta")
        slopes = torch.empty(4, device="meta", requires_grad=True)
        for t in (q, k, v):
            t.requires_grad_()
        o, _ = self.call(q, k, v, [slopes])
        dq, dk, dv, ds = torch.autograd.grad(o.sum(), (q, k, v, slopes))
        self.assertEqual((dq.shape, dk.shape, dv.shape, ds.shape),
                         (q.shape, k.shape, v.shape, slopes.shape))
        self.assertEqual((dq.dtype, ds.dtype), (torch.bfloat16, torch.float32))
        # A captured tensor that does not require grad costs nothing: no gradient is made.
        with torch.no_grad():
            o, lse = self.call(q, k, v, [slopes])
            out = torch.ops.cubridge.attention_backward(o, q, k, v, o, lse, [slopes], [0], 0.125,
                                                        self.kernel.folder)
        self.assertEqual(len(out[3]), 0)
        # A gradient of the gradient is refused rather than taken as a constant.
        with self.assertRaisesRegex(RuntimeError, "create_graph=True, double backward"):
            torch.ops.cubridge.attention_backward(o, q, k, v, o, lse, [slopes], [1], 0.125,
                                                  self.kernel.folder)

    def test_backward_on_the_cpu_says_it_runs_on_a_gpu(self):
        q, k, v = qkv(hq=4, hkv=2)
        grad_o = torch.zeros_like(q)
        lse = torch.zeros(q.shape[:3])
        with self.assertRaisesRegex(ValueError, "attention_backward: the kernel runs on a CUDA GPU"):
            torch.ops.cubridge.attention_backward(grad_o, q, k, v, q, lse, [torch.zeros(4)], [1],
                                                  0.125, self.kernel.folder)
        with self.assertRaisesRegex(ValueError, r"lse has shape \[4, 40\]"):
            torch.ops.cubridge.attention_backward(grad_o, q, k, v, q, lse[0], [torch.zeros(4)],
                                                  [1], 0.125, self.kernel.folder)

    def test_bad_calls_raise_before_any_launch(self):
        q, k, v = qkv(hq=4, hkv=2)
        slopes = torch.zeros(4)
        cases = [
            ((q.float(), k, v, [slopes]), TypeError, "q is Float; this kernel was built for bfloat16"),
            ((q, k, v, [slopes.double()]), TypeError, "captured tensor 'SLOPES' is Double"),
            ((q, k, v, [torch.zeros(2)]), ValueError,
             r"captured tensor 'SLOPES' has shape \[2\]; at this call's shape the variant reads 4"),
            ((q, k, v, []), ValueError, r"got 0 captured tensors; this kernel takes 1 \(SLOPES\)"),
            ((q[:, :3], k, v, [slopes]), ValueError, "q has 3 heads and k, v 2 and 2"),
            ((q[..., :32], k, v, [slopes]), ValueError, "q has head_dim 32"),
            ((q[0], k, v, [slopes]), ValueError, r"q has shape \[4, 40, 64\]"),
            ((q, k, v, [torch.zeros(4, 4)]), ValueError, "indexes it with 1 indices"),
        ]
        for args, error, pattern in cases:
            with self.subTest(pattern=pattern):
                with self.assertRaisesRegex(error, pattern):
                    self.call(*args)

    def test_a_folder_without_a_backward_gives_a_forward_whose_backward_says_why(self):
        cases = [({"available": False, "reason": "the differentiator refused it"},
                  "could not make this variant's backward kernel: the differentiator refused it"),
                 (None, "has no backward kernel: it was made without one")]
        for section, message in cases:
            folder = tempfile.mkdtemp()
            for name in ("report.json", "kernel.cu"):
                shutil.copy(os.path.join(self.kernel.folder, name), folder)
            with open(os.path.join(folder, "report.json")) as f:
                report = json.load(f)
            report.pop("backward")
            if section is not None:
                report["backward"] = section
            with open(os.path.join(folder, "report.json"), "w") as f:
                json.dump(report, f)
            q, k, v = qkv(b=1, hq=4, hkv=2, s=33, device="meta")
            q.requires_grad_()
            o, _ = self.op(q, k, v, [torch.empty(4, device="meta")], 0.125, folder)
            with self.assertRaisesRegex(RuntimeError, message):
                o.sum().backward()

    def test_a_folder_that_is_not_a_kernel_is_named(self):
        q, k, v = qkv(hq=4, hkv=2)
        with self.assertRaisesRegex(ValueError, "report.json: cannot read it"):
            self.op(q, k, v, [], 0.1, tempfile.mkdtemp())


if __name__ == "__main__":
    unittest.main()
