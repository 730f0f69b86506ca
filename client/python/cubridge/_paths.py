"""Where the package finds the op library and cubridge-cli.

In the build tree CMake writes ``_build_paths.py`` beside this file; an install puts the op
library in the package folder and cubridge-cli on PATH. ``CUBRIDGE_TORCH_LIBRARY`` and
``CUBRIDGE_CLI`` override both.
"""

import os
import shutil

_here = os.path.dirname(os.path.abspath(__file__))

try:
    from . import _build_paths  # written by CMake into the build tree's copy of the package
except ImportError:
    _build_paths = None


def library():
    if os.environ.get("CUBRIDGE_TORCH_LIBRARY"):
        return os.environ["CUBRIDGE_TORCH_LIBRARY"]
    local = os.path.join(_here, "libcubridge_torch.so")
    if os.path.exists(local):
        return local
    return getattr(_build_paths, "LIBRARY", None)


def cli():
    if _build_paths is not None and os.path.exists(_build_paths.CLI):
        return _build_paths.CLI
    return shutil.which("cubridge-cli")
