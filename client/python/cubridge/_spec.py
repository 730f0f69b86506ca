"""A user's mask_mod / score_mod turned into a CuBridge spec file.

The functions' own source is read with ``inspect``; what they close over (closure cells and
globals) becomes the spec's parameters (ints, floats, bools: values substituted as defaults) and
buffers (tensors: appended as tensor parameters, passed to the kernel at each call). Helper
functions they call are copied in. Nothing is translated here: the C++ frontend reads the
result and reports errors against it, which ``Spec.user_location`` maps back to the user's
file and line.
"""

import ast
import builtins
import hashlib
import inspect
import re
import textwrap
import types

import torch

# The most elements a captured tensor holds (cuir/spec/tensors.cc, kMaxBufferElements): checked
# here, before the tensor is written for the pipeline (a full [B, H, S, S] bias at S = 8k is 2^32).
MAX_BUFFER_ELEMENTS = 1 << 31

# Names CuIR binds itself (docs/spec.md): a captured value of such a name gets a suffix.
RESERVED = frozenset(
    "b h q_idx kv_idx score batch heads_q heads_kv head_dim seqlen_q seqlen_kv softmax_scale "
    "m_block n_block kv_h q_lo q_hi kv_lo kv_hi full BLOCK_M BLOCK_N STAGES WARPS q k v".split())
POSITIONAL = {"mask_mod": ("b", "h", "q_idx", "kv_idx"),
              "score_mod": ("score", "b", "h", "q_idx", "kv_idx")}


class SpecError(ValueError):
    """A function CuBridge cannot take, with where and what to change."""


class Spec:
    def __init__(self, text, buffers, sources, positions):
        self.text = text            # the spec file
        self.buffers = buffers      # {spec name: tensor}, the tensors captured now
        # {spec name: (role, name, attributes)}: where each tensor is read, so a later call
        # reads it again from that call's functions (a new lambda closes over new tensors).
        self.sources = sources
        self._positions = positions  # {(spec line, col): (file, line, col)} of each node

    def tensors(self, names, score_mod, mask_mod):
        """The tensors the functions capture now, for these spec names."""
        mods = {"score_mod": score_mod, "mask_mod": mask_mod}
        out = []
        for name in names:
            role, root, attrs = self.sources[name]
            ok, value = _value_of(mods[role], root)
            for attr in attrs:
                value = getattr(value, attr)
            if not ok or not isinstance(value, torch.Tensor):
                raise SpecError(f"{role}: `{'.'.join((root,) + attrs)}` is no longer a tensor")
            out.append(value)
        return out

    def user_location(self, line, col):
        """(file, line, col) in the user's source for a line:col of the spec file (1-based),
        or None where the spec line is CuBridge's own (imports, the header)."""
        exact = self._positions.get((line, col))
        if exact is not None:
            return exact
        on_line = sorted((c, where) for (l, c), where in self._positions.items() if l == line)
        before = [where for c, where in on_line if c <= col] or [where for _, where in on_line]
        if not before:
            return None
        file, user_line, user_col = before[-1]
        return file, user_line, user_col


class _Unparser(ast._Unparser):
    """ast.unparse that keeps `~x` in parentheses. The frontend reads a spec with TorchScript's
    grammar, where `~` binds looser than the binary operators (`~a & b` is `~(a & b)`), while
    ast.unparse drops the parentheses Python does not need: `(~a) & b` would change meaning."""

    def visit_UnaryOp(self, node):
        if not isinstance(node.op, ast.Invert):
            return super().visit_UnaryOp(node)
        self.write("(")
        super().visit_UnaryOp(node)
        self.write(")")


def _unparse(node):
    return _Unparser().visit(node)


def _where(fn):
    try:
        return f"{inspect.getsourcefile(fn)}:{fn.__code__.co_firstlineno}"
    except TypeError:
        return getattr(fn, "__qualname__", repr(fn))


def _function_node(fn):
    """The ast of fn's definition (a lambda becomes a def), its source line offset."""
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError) as e:
        raise SpecError(f"{getattr(fn, '__qualname__', fn)}: cannot read its source ({e}); "
                        "define it in a .py file (not in a REPL or with exec)") from None
    source = textwrap.dedent("".join(lines))
    if fn.__name__ != "<lambda>":
        tree = ast.parse(source)
        node = tree.body[0]
        if isinstance(node, ast.AsyncFunctionDef) or not isinstance(node, ast.FunctionDef):
            raise SpecError(f"{_where(fn)}: {fn.__name__} is not a plain def")
        return node, first - 1
    # A lambda: its lines may be cut from a larger expression (a call's argument), so each
    # `lambda` is parsed alone, from the keyword to the longest end that parses.
    argnames = fn.__code__.co_varnames[:fn.__code__.co_argcount]
    found = []
    for m in re.finditer(r"\blambda\b", source):
        tail = source[m.start():m.start() + 4000]
        for end in range(len(tail), 0, -1):
            try:
                expr = ast.parse(tail[:end], mode="eval").body
            except SyntaxError:
                continue
            if isinstance(expr, ast.Lambda) and tuple(a.arg for a in expr.args.args) == argnames:
                # Back to the source's lines and columns.
                line_start = source.rfind("\n", 0, m.start()) + 1
                for n in ast.walk(expr):
                    if getattr(n, "lineno", None) == 1:
                        n.col_offset += m.start() - line_start
                ast.increment_lineno(expr, source.count("\n", 0, m.start()))
                found.append(expr)
            break
    if len(found) != 1:
        raise SpecError(f"{_where(fn)}: cannot tell this lambda apart from the others on its "
                        "lines; write it as a def")
    lam = found[0]
    node = ast.FunctionDef(name="lambda_", args=lam.args, body=[ast.Return(lam.body)],
                           decorator_list=[], returns=None, type_comment=None)
    ast.copy_location(node, lam)
    ast.fix_missing_locations(node)
    return node, first - 1


def _value_of(fn, name):
    code = fn.__code__
    if name in code.co_freevars and fn.__closure__:
        cell = fn.__closure__[code.co_freevars.index(name)]
        try:
            return True, cell.cell_contents
        except ValueError:
            return False, None
    if name in fn.__globals__:
        return True, fn.__globals__[name]
    return False, None


def _names_tensor(fn, expr):
    """Whether an annotation (`Tensor`, `torch.Tensor`) names torch.Tensor where fn sees it."""
    chain = []
    while isinstance(expr, ast.Attribute):
        chain.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return False
    ok, value = _value_of(fn, expr.id)
    for attr in reversed(chain):
        if not ok:
            break
        ok, value = hasattr(value, attr), getattr(value, attr, None)
    return ok and value is torch.Tensor


def _is_scalar(v):
    return isinstance(v, (bool, int, float)) and not isinstance(v, torch.Tensor)


class _Builder:
    def __init__(self):
        self.imports = {}      # alias -> module name
        self.helpers = {}      # name -> (function, ast)
        self.buffers = {}      # spec name -> tensor
        self.params = {}       # spec name -> scalar value
        self.names = {}        # id of captured object or (fn, name) -> spec name
        self.sources = {}      # spec name of a tensor -> (role, name, attributes)
        self.helper_names = {}  # id of a helper function -> its name in the spec

    def spec_name(self, name, value):
        key = id(value) if isinstance(value, torch.Tensor) else (name, repr(value))
        if key in self.names:
            return self.names[key]
        base = name + "_" if name in RESERVED else name
        out, n = base, 1
        while out in self.buffers or out in self.params or out in self.helpers:
            n += 1
            out = f"{base}{n}"
        self.names[key] = out
        return out

    def capture(self, fn, node, role):
        """Rewrites node's free names; returns the names of the buffers and params it uses."""
        where = _where(fn)
        local = {a.arg for a in node.args.args + node.args.kwonlyargs}
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                local.add(n.id)
        used = []  # spec names of buffers/params, in order of first use

        builder = self

        class Rewrite(ast.NodeTransformer):
            # A `Tensor` annotation is dropped, not captured: an unannotated argument is a
            # tensor to the frontend (TorchScript), and `Tensor` may be imported under any name.
            def visit_arg(self, a):
                if a.annotation is not None and _names_tensor(fn, a.annotation):
                    a.annotation = None
                return self.generic_visit(a)

            def visit_FunctionDef(self, f):
                if f.returns is not None and _names_tensor(fn, f.returns):
                    f.returns = None
                return self.generic_visit(f)

            def visit_Attribute(self, a):
                # self.slopes, model.table: an attribute chain on a captured object.
                chain, root = [], a
                while isinstance(root, ast.Attribute):
                    chain.append(root.attr)
                    root = root.value
                if isinstance(root, ast.Name) and root.id not in local:
                    ok, value = _value_of(fn, root.id)
                    if ok and not isinstance(value, types.ModuleType):
                        for attr in reversed(chain):
                            value = getattr(value, attr)
                        attrs = tuple(reversed(chain))
                        name = "_".join((root.id,) + attrs)
                        return ast.copy_location(
                            builder.bind(fn, where, name, value, used, (role, root.id, attrs)), a)
                return self.generic_visit(a)

            def visit_Name(self, n):
                if n.id in local or not isinstance(n.ctx, ast.Load):
                    return n
                ok, value = _value_of(fn, n.id)
                if not ok:
                    if hasattr(builtins, n.id):
                        return n
                    raise SpecError(f"{where}: `{n.id}` is neither an argument, a local nor a "
                                    "name the function can see")
                return ast.copy_location(
                    builder.bind(fn, where, n.id, value, used, (role, n.id, ())), n)

        node = Rewrite().visit(node)
        return node, used

    def bind(self, fn, where, name, value, used, source):
        if isinstance(value, types.ModuleType):
            if value.__name__ not in ("torch", "math"):
                raise SpecError(f"{where}: uses module `{value.__name__}`; a spec may use torch "
                                "and math")
            self.imports[name] = value.__name__
            return ast.Name(id=name, ctx=ast.Load())
        if isinstance(value, torch.Tensor):
            if value.numel() > MAX_BUFFER_ELEMENTS:
                raise SpecError(
                    f"{where}: captures `{name}`, a tensor of shape {tuple(value.shape)} "
                    f"({value.numel()} elements); a captured tensor holds at most 2^31 elements "
                    "(docs/spec.md): compute its values in the function from smaller tensors "
                    "(a per-head table and the indices, e.g.) instead")
            spec = self.spec_name(name, value)
            self.buffers[spec] = value
            self.sources.setdefault(spec, source)
        elif _is_scalar(value):
            spec = self.spec_name(name, value)
            self.params[spec] = value
        elif isinstance(value, types.FunctionType):
            return ast.Name(id=self.helper(value, name), ctx=ast.Load())
        else:
            raise SpecError(f"{where}: captures `{name}`, a {type(value).__name__}; CuBridge takes "
                            "tensors, ints, floats and bools (pass other values in as one of those)")
        if spec not in used:
            used.append(spec)
        return ast.Name(id=spec, ctx=ast.Load())

    def helper(self, fn, name):
        """Copies fn in as a helper (once per function) and returns its name in the spec: the
        name it is called by, unless that is a role's (a spec file's own score_mod called from a
        wrapper) or another helper's."""
        if id(fn) in self.helper_names:
            return self.helper_names[id(fn)]
        spec = name
        while spec in POSITIONAL or spec in self.helpers:
            spec += "_fn"
        self.helper_names[id(fn)] = spec
        node, offset = _function_node(fn)
        node.name = spec
        node.decorator_list = []
        self.helpers[spec] = None  # taken, while its own body is read
        node, used = self.capture(fn, node, "helper")
        if used:
            raise SpecError(f"{_where(fn)}: helper `{name}` reads {', '.join(used)} from outside; "
                            "pass them to it as arguments")
        self.helpers[spec] = (fn, node, offset)
        return spec


def build_spec(score_mod=None, mask_mod=None):
    """The spec file for these functions and the tensors they capture now."""
    if score_mod is None and mask_mod is None:
        raise SpecError("give a score_mod, a mask_mod or both")
    b = _Builder()
    mods = []
    for role, fn in (("mask_mod", mask_mod), ("score_mod", score_mod)):
        if fn is None:
            continue
        if not isinstance(fn, types.FunctionType):
            raise SpecError(f"{role} must be a Python function (def or lambda); got {type(fn).__name__}")
        node, offset = _function_node(fn)
        want = POSITIONAL[role]
        args = [a.arg for a in node.args.args]
        if len(args) < len(want) or node.args.vararg or node.args.kwarg:
            raise SpecError(f"{_where(fn)}: {role} takes ({', '.join(want)}), as for "
                            f"flex_attention; it has ({', '.join(args)})")
        # The positional names as the frontend knows them; the rest are the user's defaults.
        rename = dict(zip(args, want))
        node.decorator_list = []
        node.name = role
        node.returns = None
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and n.id in rename:
                n.id = rename[n.id]
            elif isinstance(n, ast.arg) and n.arg in rename:
                n.arg = rename[n.arg]
        node, used = b.capture(fn, node, role)
        # Tensors after the positional arguments (they take no default), scalars last with
        # theirs, after the user's own defaulted arguments.
        buffers = [ast.arg(arg=n, annotation=None) for n in used if n in b.buffers]
        node.args.args[len(want):len(want)] = buffers
        for name in used:
            if name in b.params:
                value = b.params[name]
                node.args.args.append(ast.arg(arg=name, annotation=ast.Name(
                    id=type(value).__name__, ctx=ast.Load())))
                node.args.defaults.append(ast.Constant(value=value))
        mods.append((fn, node, offset))

    lines = ["# generated by cubridge from " + ", ".join(_where(fn) for fn, _, _ in mods)]
    for alias, module in sorted(b.imports.items()):
        lines.append(f"import {module}" if alias == module else f"import {module} as {alias}")
    positions = {}
    for fn, node, offset in list(b.helpers.values()) + mods:
        lines += ["", ""]
        text = _unparse(ast.fix_missing_locations(node))
        first = len(lines)  # the def's line in the spec, less one
        lines.extend(text.splitlines())
        try:
            file = inspect.getsourcefile(fn)
        except TypeError:
            file = "<unknown>"
        # Unparsing re-flows the lines: the same tree parsed back pairs each node's place in the
        # spec with its place in the user's file (linenos are the user's, from the parse).
        again = ast.parse(text).body[0]
        for mine, theirs in zip(ast.walk(node), ast.walk(again)):
            if hasattr(mine, "lineno") and hasattr(theirs, "lineno"):
                positions.setdefault((theirs.lineno + first, theirs.col_offset + 1),
                                     (file, mine.lineno + offset, mine.col_offset + 1 + node_indent(fn)))
    return Spec("\n".join(lines) + "\n", dict(b.buffers), dict(b.sources), positions)


def node_indent(fn):
    try:
        line = inspect.getsourcelines(fn)[0][0]
    except (OSError, TypeError):
        return 0
    return len(line) - len(line.lstrip())


def _fingerprint_value(v, seen):
    if isinstance(v, torch.Tensor):
        return ("T", str(v.dtype), v.dim())
    if _is_scalar(v):
        return ("S", type(v).__name__, v)
    if isinstance(v, types.ModuleType):
        return ("M", v.__name__)
    if isinstance(v, types.FunctionType):
        return fingerprint(v, seen)
    return ("O", id(v))  # attribute chains: the object itself; rebuilt when it changes


def fingerprint(fn, seen=None):
    """What the spec of fn depends on, cheap to compute on every call: its code, and the kind
    (tensor dtype and rank) or value (scalars) of each name it reads from outside."""
    if fn is None:
        return None
    seen = set() if seen is None else seen
    if id(fn) in seen:
        return ("F", id(fn.__code__))
    seen.add(id(fn))
    code = fn.__code__
    parts = [("F", code.co_filename, code.co_firstlineno, code.co_code, code.co_consts)]
    for name in code.co_freevars + code.co_names:
        ok, value = _value_of(fn, name)
        if ok:
            parts.append((name, _fingerprint_value(value, seen)))
    return tuple(parts)


def digest(*parts):
    return hashlib.sha256(repr(parts).encode()).hexdigest()
