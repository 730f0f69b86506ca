"""cubridge.attention and cubridge.compile."""

import math
import os

import torch

from . import _kernels, _paths
from ._kernels import CubridgeError
from ._spec import SpecError, build_spec, fingerprint

_loaded = False


def _load_library():
    global _loaded
    if not _loaded:
        path = _paths.library()
        if not path or not os.path.exists(path):
            raise CubridgeError("cannot find the op library libcubridge_torch.so: build CuBridge "
                                "(README, 'From PyTorch') or set CUBRIDGE_TORCH_LIBRARY to its path")
        torch.ops.load_library(path)
        _loaded = True


_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16"}

try:  # torch 2.x: run while tracing, the result a constant of the graph
    from torch._dynamo import assume_constant_result as _assume_constant_result
except ImportError:
    _assume_constant_result = None


class Compiled:
    """A variant, ready to call: ``Compiled(score_mod, mask_mod)(q, k, v)``. Its kernel is
    resolved on the first call for each head layout, dtype and scale, then looked up."""

    def __init__(self, score_mod=None, mask_mod=None):
        if score_mod is None and mask_mod is None:
            raise SpecError("give a score_mod, a mask_mod or both")
        self.score_mod, self.mask_mod = score_mod, mask_mod
        self._held = {}  # kernel folder -> captured tensors, for graphs torch.compile traced
        _load_library()  # before any trace: torch.compile sees the op registered

    def kernel(self, q, k, v, scale=None, enable_gqa=False, arch=None):
        """The Kernel for these inputs (adapting the variant on first use), the tensors to pass
        for its captured tensors in its slot order, and the scale."""
        _check_inputs(q, k, v, enable_gqa)
        scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else float(scale)
        shape = (q.size(0), q.size(1), k.size(1), q.size(2), k.size(2), q.size(3))
        kernel, spec = self._resolve(shape, q.dtype, q.device, scale, arch)
        # The tensors are read at each call: a captured tensor updated in place or rebound
        # between calls is what the kernel sees, as with flex_attention.
        buffers = spec.tensors(kernel.buffer_names, self.score_mod, self.mask_mod)
        return kernel, buffers, scale

    def _resolve(self, shape, dtype, device, scale, arch=None):
        batch, heads_q, heads_kv, seqlen_q, seqlen_kv, head_dim = shape
        arch = arch or _kernels.arch_for(device)
        config = {"heads_q": heads_q, "heads_kv": heads_kv, "head_dim": head_dim,
                  "dtype": _DTYPES[dtype], "scale": scale}
        key = (fingerprint(self.score_mod), fingerprint(self.mask_mod), tuple(config.items()),
               arch, str(device))
        full = dict(config, batch=batch, seqlen_q=seqlen_q, seqlen_kv=seqlen_kv)
        return _kernels.kernel_for(key, lambda: build_spec(self.score_mod, self.mask_mod), full,
                                   arch)

    def _traced(self, shape, dtype, device, scale):
        """Under torch.compile: resolved while the graph is traced (run eagerly, its result a
        constant of the graph), the captured tensors held for the graph to read. A captured
        tensor is then the object the functions closed over when the graph was traced: update it
        in place (as parameters are), a rebound name is not seen."""
        kernel, spec = self._resolve(shape, dtype, device, scale)
        self._held[kernel.folder] = spec.tensors(kernel.buffer_names, self.score_mod,
                                                 self.mask_mod)
        return kernel.folder

    if _assume_constant_result is not None:
        _traced = _assume_constant_result(_traced)

    def __call__(self, q, k, v, scale=None, enable_gqa=False, return_lse=False):
        if _compiling():
            _check_inputs(q, k, v, enable_gqa)
            scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else float(scale)
            folder = self._traced((q.size(0), q.size(1), k.size(1), q.size(2), k.size(2),
                                   q.size(3)), q.dtype, q.device, scale)
            buffers = self._held[folder]
        else:
            kernel, buffers, scale = self.kernel(q, k, v, scale, enable_gqa)
            folder = kernel.folder
            _load_library()
        out, lse = torch.ops.cubridge.attention(q, k, v, buffers, scale, folder)
        return (out, lse) if return_lse else out


def _compiling():
    compiler = getattr(torch, "compiler", None)  # torch 2.x; 1.13 has no torch.compile
    return compiler is not None and hasattr(compiler, "is_compiling") and compiler.is_compiling()


def _check_inputs(q, k, v, enable_gqa):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError(f"cubridge.attention: {name} must be a [batch, heads, seqlen, head_dim] "
                             "tensor, as for flex_attention")
        if t.dtype not in _DTYPES:
            raise TypeError(f"cubridge.attention: {name} is {t.dtype}; CuBridge kernels take "
                            "bfloat16 or float16 (convert with .to(torch.bfloat16))")
    if k.size(1) != q.size(1) and not enable_gqa:
        raise ValueError(f"cubridge.attention: q has {q.size(1)} heads and k {k.size(1)}; pass "
                         "enable_gqa=True for grouped-query attention, as for flex_attention")
    if q.size(1) % k.size(1) != 0:
        raise ValueError(f"cubridge.attention: q's {q.size(1)} heads are not a multiple of k's "
                         f"{k.size(1)}")


def compile(score_mod=None, mask_mod=None):  # noqa: A001  (cubridge.compile, as torch.compile)
    """A reusable callable for this variant: ``fn(q, k, v, scale=None, enable_gqa=False)``."""
    return Compiled(score_mod, mask_mod)


def attention(q, k, v, score_mod=None, mask_mod=None, scale=None, enable_gqa=False,
              return_lse=False):
    """flex_attention's call with CuBridge's kernel: the same q, k, v ([batch, heads, seqlen,
    head_dim], bf16 or fp16), score_mod and mask_mod (plain functions, not a BlockMask), scale
    and enable_gqa. Returns O, or (O, LSE) with return_lse=True."""
    # No table of Compiled by function: a lambda written in forward() is a new object each call;
    # the kernel table is keyed by what the functions compute (their code and captures' kinds).
    return Compiled(score_mod, mask_mod)(q, k, v, scale=scale, enable_gqa=enable_gqa,
                                         return_lse=return_lse)
