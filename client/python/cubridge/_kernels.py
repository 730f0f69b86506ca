"""Where a kernel comes from: this process's table, the kernel folders on disk, or the pipeline.

The pipeline is C++: ``cubridge-cli adapt --local`` on this machine (with its own on-disk cache),
or, when ``CUBRIDGE_ADDRESS`` names a coordinator, ``cubridge-cli submit`` and ``get`` (a cache
hit there serves every machine of the team). Each verified kernel lands in a folder under
``$CUBRIDGE_TORCH_CACHE`` (default ``~/.cache/cubridge/torch``) named by the digest of the spec
file and the call's kernel-relevant config; the op library loads it from there, and keeps its
compiled module beside it, so a new process neither adapts nor compiles again.
"""

import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile

import torch

from . import _paths
from ._spec import digest

# What this process has resolved: key -> Kernel. The second call of a variant is one lookup.
_table = {}
stats = {"pipeline_runs": 0, "disk_hits": 0}


class CubridgeError(RuntimeError):
    """CuBridge could not give a kernel for this variant; the message says why and what to do."""


class Kernel:
    """A verified kernel folder and what the op needs to call it."""

    def __init__(self, folder):
        self.folder = folder
        with open(os.path.join(folder, "report.json")) as f:
            report = json.load(f)
        self.report = report
        self.spec_hash = report["spec_hash"]
        self.arch = report["arch"]
        self.buffer_names = [b["name"] for b in report["lowering"]["buffers"]]

    def __repr__(self):
        return f"Kernel({self.spec_hash[:16]} {self.arch} at {self.folder})"


def cache_root():
    return os.environ.get("CUBRIDGE_TORCH_CACHE",
                          os.path.join(os.path.expanduser("~"), ".cache", "cubridge", "torch"))


def cli():
    path = os.environ.get("CUBRIDGE_CLI") or _paths.cli()
    if not path or not os.path.exists(path):
        raise CubridgeError("cannot find cubridge-cli: install CuBridge (README, 'From PyTorch') or set "
                            "CUBRIDGE_CLI to its path")
    return path


def arch_for(device):
    """The kernel arch for a device: sm_90 kernels need an sm_90 GPU (wgmma); newer and older
    Ampere-or-later GPUs run the sm_80 expert's kernels."""
    if device.type != "cuda":
        return os.environ.get("CUBRIDGE_ARCH", "sm_90")
    major, minor = torch.cuda.get_device_capability(device)
    if major == 9:
        return "sm_90"
    if major >= 8:
        return "sm_80"
    raise CubridgeError(f"{torch.cuda.get_device_name(device)} is sm_{major}{minor}; CuBridge "
                        "kernels need sm_80 or newer")


_LOCATION = re.compile(r"\S*spec\.py:(\d+):(\d+): ")


def _explain(spec, text):
    """The pipeline's errors, their spec.py:line:col mapped to the user's file."""
    def repl(m):
        where = spec.user_location(int(m.group(1)), int(m.group(2)))
        if where is None:
            return m.group(0)
        return f"{where[0]}:{where[1]}:{where[2]}: "
    return _LOCATION.sub(repl, text.strip())


def _run(args, spec, what, spec_path):
    stats["pipeline_runs"] += 1
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        detail = _explain(spec, (r.stderr or "") + ("\n" + r.stdout if r.stdout else ""))
        raise CubridgeError(f"{what} failed (exit {r.returncode}):\n{detail}\n"
                            f"The spec CuBridge built from your functions is in {spec_path}")
    return r.stdout


def _config_args(config, arch):
    return ["--arch", arch, "--batch", str(config["batch"]), "--heads-q", str(config["heads_q"]),
            "--heads-kv", str(config["heads_kv"]), "--head-dim", str(config["head_dim"]),
            "--seqlen-q", str(config["seqlen_q"]), "--seqlen-kv", str(config["seqlen_kv"]),
            "--dtype", config["dtype"], "--scale", repr(config["scale"])]


# What a kernel folder holds, in the on-disk key: folders made before the backward kernels
# (layout 1) are made again rather than found without one.
FOLDER_LAYOUT = 2


def adapt_args():
    """More `cubridge-cli adapt` flags from $CUBRIDGE_ADAPT_ARGS (e.g. `--tile 128x128w12` to
    skip the autotuning); part of the kernel folder's key."""
    return shlex.split(os.environ.get("CUBRIDGE_ADAPT_ARGS", ""))


def _produce(spec, config, arch, folder):
    """Runs the pipeline for the spec into `folder` (published whole, or not at all)."""
    work = tempfile.mkdtemp(prefix="cubridge-")
    ok = False
    try:
        spec_path = os.path.join(work, "spec.py")
        with open(spec_path, "w") as f:
            f.write(spec.text)
        buffer_args = []
        for name, tensor in spec.buffers.items():
            path = os.path.join(work, name + ".pt")
            torch.save(tensor.detach().to("cpu").contiguous(), path)
            buffer_args += ["--buffer", f"{name}=tensor:{path}"]
        out = os.path.join(work, "kernel")
        address = os.environ.get("CUBRIDGE_ADDRESS")
        if address:
            # A CPU-only service verifies at the IR level: CUBRIDGE_VERIFICATION=ir asks for that.
            level = os.environ.get("CUBRIDGE_VERIFICATION")
            submitted = _run([cli(), "submit", spec_path, "--address", address, "--json", "--watch"]
                             + (["--verification", level] if level else [])
                             + _config_args(config, arch) + buffer_args, spec, "cubridge-cli submit",
                             spec_path)
            job = None
            for line in submitted.splitlines():
                try:
                    job = json.loads(line).get("job_id") or job
                except ValueError:
                    continue
            if job is None:
                raise CubridgeError(f"cubridge-cli submit named no job:\n{submitted}")
            _run([cli(), "get", job, "--address", address, "--arch", arch, "--out", out], spec,
                 "cubridge-cli get", spec_path)
        else:
            _run([cli(), "adapt", spec_path, "--local", "--out", out, "--json"]
                 + _config_args(config, arch) + buffer_args + adapt_args(), spec,
                 "cubridge-cli adapt", spec_path)
        os.makedirs(os.path.dirname(folder), exist_ok=True)
        try:
            os.rename(out, folder)
        except OSError:
            if not os.path.exists(os.path.join(folder, "report.json")):
                raise
        ok = True
    finally:
        # A failure keeps the spec file it names (and the tensors) for the user to look at.
        if ok:
            shutil.rmtree(work, ignore_errors=True)


def kernel_for(key, spec_factory, config, arch):
    """The kernel for `key`, building the spec (spec_factory()) only when this process has not
    resolved the key yet. Returns (kernel, spec or None)."""
    hit = _table.get(key)
    if hit is not None:
        return hit
    spec = spec_factory()
    buffers = sorted((n, str(t.dtype), t.dim()) for n, t in spec.buffers.items())
    kernel_config = {k: config[k] for k in ("heads_q", "heads_kv", "head_dim", "dtype", "scale")}
    name = digest(spec.text, buffers, sorted(kernel_config.items()), arch, adapt_args(),
                  FOLDER_LAYOUT)
    folder = os.path.join(cache_root(), name[:32])
    if os.path.exists(os.path.join(folder, "report.json")):
        stats["disk_hits"] += 1
    else:
        _produce(spec, config, arch, folder)
    kernel = Kernel(folder)
    _table[key] = (kernel, spec)
    return kernel, spec
