"""A spec suite (examples/specs/SUITE/suite.json) for bench/run_matrix.py --suite SUITE: its
variants, their params, and captured tensors built at the benchmark's shape.

The kernels come from `CUBRIDGE_SUITE=SUITE bash bench/make_kernels.sh DIR`; each NAME.report.json
beside NAME_sm_90.cu lists the launcher's buffer slots (lowering.buffers: name, dtype, and the
least size per dimension as CuIR prints it, `?` where the values decide). The tensors follow the
suite's sources as `cubridge-cli --buffer` reads them (cuir/spec/tensors.cc), at the row's shape:
  random          int32; rank 1: a few documents (ids 0,0,..,1,1,..), else uniform in [0, S]
  random:DTYPE    floats N(0, 1), bools fair coins, ints uniform in [0, S]; shape from the reach
  random:DTYPE[D0,..]   the same at that shape
  values:A,B,..   int32 [n];  lengths:A,B,..  document ids, int32
where S = max(Sq, Skv) also stands for a dimension whose reach is `?`.
"""
import ast
import dis
import inspect
import json
import os

DTYPES = ("int32", "int64", "bool", "float32", "bfloat16", "float16")


class Suite:
    def __init__(self, root, name):
        self.name = name
        self.folder = os.path.join(root, "examples", "specs", name)
        with open(os.path.join(self.folder, "suite.json")) as fh:
            self.entries = {e["file"][:-3]: e for e in json.load(fh)["specs"]}
        self.names = list(self.entries)

    def spec_path(self, name):
        return os.path.join(self.folder, name + ".py")

    def params(self, name):
        return dict(self.entries[name].get("params", {}))

    def label(self, name):
        p = self.params(name)
        return f"{name} ({', '.join(f'{k}={v}' for k, v in p.items())})" if p else name

    @staticmethod
    def slots(kernel_dir, kname):
        """The launcher's buffer slots: [(name, dtype, extents)] from NAME.report.json."""
        with open(os.path.join(kernel_dir, kname + ".report.json")) as fh:
            report = json.load(fh)
        return [(b["name"], b["dtype"], b["extents"]) for b in report["lowering"].get("buffers", [])]

    def bench_tensors(self, kernel_dir, kname, name, batch, heads_q, heads_kv, s, params, dev):
        """The launcher's buffer slots of DIR/KNAME and the tensors of a benchmark row (Sq = Skv = s),
        from a generator seeded 1234: what the matrix times and what a profiled launch uses."""
        import torch
        gen = torch.Generator(device=dev)
        gen.manual_seed(1234)
        slots = self.slots(kernel_dir, kname)
        shape = dict(batch=batch, heads_q=heads_q, heads_kv=heads_kv, seqlen_q=s, seqlen_kv=s)
        return slots, self.tensors(name, slots, shape, params, dev, gen)

    def tensors(self, name, slots, shape, params, dev, gen):
        """{buffer name: tensor} at shape = dict(batch, heads_q, heads_kv, seqlen_q, seqlen_kv)."""
        import torch
        tokens = max(shape["seqlen_q"], shape["seqlen_kv"])
        env = dict(shape, **params)
        out = {}
        for bname, dtype, extents in slots:
            source = self.entries[name]["buffers"].get(bname, "random")
            kind, _, arg = source.partition(":")
            dims = [tokens if e == "?" else _eval_extent(e, env) for e in extents]
            tdtype = getattr(torch, dtype)
            if kind == "random" and arg:
                dt, _, rest = arg.partition("[")
                if rest:
                    dims = [int(x) for x in rest.rstrip("]").split(",") if x.strip()]
                out[bname] = _random(torch, dt, dims, tokens, dev, gen)
            elif kind == "random":
                if len(dims) == 1:
                    out[bname] = _documents(torch, dims[0], dev, gen)
                else:
                    out[bname] = _random(torch, "int32", dims, tokens, dev, gen)
            elif kind == "values":
                out[bname] = torch.tensor([int(x) for x in arg.split(",")], dtype=torch.int32, device=dev)
            elif kind == "lengths":
                lengths = [int(x) for x in arg.split(",")]
                out[bname] = torch.repeat_interleave(
                    torch.arange(len(lengths), dtype=torch.int32), torch.tensor(lengths)).to(dev)
            else:
                raise ValueError(f"{name}: buffer {bname}: source {source} has no benchmark form")
            if out[bname].dtype != tdtype:
                raise ValueError(f"{name}: buffer {bname} is {out[bname].dtype}, the kernel wants {dtype}")
        return out


def _eval_extent(text, env):
    """A CuIR extent (`heads_q`, `max(seqlen_q, seqlen_kv)`, `32`, `window + 1`) at env."""
    tree = ast.parse(text, mode="eval")
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in ("max", "min")):
            raise ValueError(f"extent `{text}`: only max/min calls are read here")
        if isinstance(node, ast.Name) and node.id not in env and node.id not in ("max", "min"):
            raise ValueError(f"extent `{text}`: unknown name {node.id}")
    return int(eval(compile(tree, "<extent>", "eval"), {"__builtins__": {"max": max, "min": min}}, env))


def _random(torch, dt, dims, tokens, dev, gen):
    if dt not in DTYPES:
        raise ValueError(f"random:{dt}: dtype not one of {', '.join(DTYPES)}")
    dtype = getattr(torch, dt)
    if dt in ("float32", "bfloat16", "float16"):
        return torch.randn(dims, generator=gen, device=dev).to(dtype)
    if dt == "bool":
        return torch.randint(0, 2, dims, generator=gen, device=dev).bool()
    return torch.randint(0, tokens + 1, dims, generator=gen, device=dev).to(dtype)


def _documents(torch, length, dev, gen):
    """1 to 5 documents of random lengths: ids 0,0,..,1,1,..; nondecreasing."""
    if length <= 1:
        return torch.zeros(length, dtype=torch.int32, device=dev)
    docs = 1 + int(torch.randint(0, min(5, length), (1,), generator=gen, device=dev).item())
    cuts = torch.randperm(length - 1, generator=gen, device=dev)[:docs - 1] + 1
    ids = torch.zeros(length, dtype=torch.int64, device=dev)
    ids[cuts] = 1
    return ids.cumsum(0).to(torch.int32)


def bound(fn, nargs, tensors, params):
    """fn(*index args) with its captured tensors and params: what FlexAttention is given."""
    if fn is None:
        return None
    names = list(inspect.signature(fn).parameters)[nargs:]
    kw = {n: tensors[n] for n in names if n in tensors}
    kw.update({n: params[n] for n in names if n in params})
    # Flex reads the arity from the signature: 4 (mask) or 5 (score) named parameters.
    if nargs == 4:
        return lambda b, h, q_idx, kv_idx: fn(b, h, q_idx, kv_idx, **kw)
    return lambda score, b, h, q_idx, kv_idx: fn(score, b, h, q_idx, kv_idx, **kw)


def reads_batch_or_head(fn, nargs):
    """Whether fn reads its b or h argument (then the mask differs across batches or heads)."""
    if fn is None:
        return False
    names = list(inspect.signature(fn).parameters)[:nargs]
    b, h = names[nargs - 4], names[nargs - 3]
    return any(i.opname.startswith("LOAD_FAST") and (i.argval in (b, h) or
               (isinstance(i.argval, tuple) and (b in i.argval or h in i.argval)))
               for i in dis.get_instructions(fn))
