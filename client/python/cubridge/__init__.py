"""CuBridge from PyTorch: the mask_mod / score_mod you pass to flex_attention, as a verified
CUDA kernel called like flex_attention.

    from cubridge import attention
    out = attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod)

The first call of a variant adapts an expert kernel to it (the C++ pipeline: ``cubridge-cli
adapt --local``, or the service when ``CUBRIDGE_ADDRESS`` is set); later calls, in this process
or another, reuse it. The kernel runs through the LibTorch op ``torch.ops.cubridge.attention``.
"""

from ._api import Compiled, attention, compile  # noqa: F401  (compile shadows the builtin here only)
from ._kernels import CubridgeError, Kernel, stats  # noqa: F401
from ._spec import SpecError, build_spec  # noqa: F401
