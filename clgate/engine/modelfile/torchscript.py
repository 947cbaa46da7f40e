"""TorchScript archives: every piece of code judged on its parsed form before ``torch.jit.load``.

``torch.jit.save`` stores a module's code as Python-syntax files under ``code/`` — every method of every
submodule, ``__getstate__``/``__setstate__`` (which ``torch.jit.load`` *runs*), forward pre- and
post-hooks, script functions — and its objects and constants as pickles (``data.pkl``,
``constants.pkl``, the ``*.debug_pkl`` source maps). Before anything is loaded:

- each ``code/`` file is parsed with :mod:`ast` and walked node by node. Attribute chains are
  read from the tree, so ``torch . from_file(`` is the chain ``torch.from_file`` however it is spaced.
  ``torch.<op>`` and ``ops.<prim|aten>.<op>`` must be in the explicit allowlist of :mod:`.ops`; other
  names must be the function's own variables, the TorchScript builtins and types of
  :data:`BUILTIN_NAMES`, or ``__torch__.…`` code of the archive itself (checked too); ``getattr`` takes
  a literal, non-dunder name only; dunder attributes, imports, lambdas, ``print`` and every statement
  TorchScript does not write are refused;
- each pickle is judged by its opcodes (:mod:`.pickles`): tensors, containers and the archive's own
  script classes only.

After loading, :func:`check_torchscript_ops` walks the compiled graphs (calls inlined) as a second line.
"""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import torch

from clgate.engine.errors import ModelError
from clgate.engine.modelfile.ops import ATEN_OPS, PRIM_OPS, TORCHSCRIPT_BUILTINS
from clgate.engine.modelfile.pickles import TORCHSCRIPT_POLICY, pickle_refusal
from clgate.engine.modelfile.weights import EXPORT_HINT, inspect_model_file
from clgate.engine.modelfile.zipcheck import open_checked, read_member, refuse

ROOTS = frozenset({"torch", "ops", "__torch__"})
BUILTIN_NAMES = frozenset(
    str.split(
        """
    Tensor List Dict Optional Tuple Final NoneType Any Union Future Await Device Module Interface Enum
    NamedTuple RRef Storage Stream Generator Layout ScalarType MemoryFormat QScheme Capsule number
    int float bool str complex len range isinstance getattr hasattr annotate unchecked_cast
    uninitialized min max abs round divmod enumerate zip list dict tuple sum all any sorted ord chr hex
    oct bin hash reversed CONSTANTS fork wait inf nan
    """
    )
)
CLASS_DUNDERS = frozenset(
    {"__parameters__", "__buffers__", "__annotations__", "__forward_pre_hooks__", "__forward_hooks__"}
)
CLASS_BASES = frozenset({"Module", "Interface", "Enum", "NamedTuple"})
_NODES = (
    ast.Module, ast.ClassDef, ast.FunctionDef, ast.arguments, ast.arg, ast.Return, ast.Assign,
    ast.AnnAssign, ast.AugAssign, ast.If, ast.For, ast.While, ast.Break, ast.Continue, ast.Pass,
    ast.Expr, ast.Assert, ast.Compare, ast.BoolOp, ast.BinOp, ast.UnaryOp, ast.IfExp, ast.Call,
    ast.keyword, ast.Attribute, ast.Subscript, ast.Slice, ast.Name, ast.Constant, ast.List, ast.Tuple,
    ast.Dict, ast.Load, ast.Store, ast.Import, ast.alias, ast.operator, ast.unaryop, ast.cmpop, ast.boolop,
)  # fmt: skip
# Never run from a candidate, whatever the receiver: file, process and library access.
TORCHSCRIPT_DENIED_OPS = frozenset({"aten::from_file", "aten::save", "aten::load", "prim::Print"})
TORCHSCRIPT_NAMESPACES = frozenset({"aten", "prim"})
_FILE_ARGUMENTS = ("file", "path", "filename", "url", "library")


class CodeRefused(Exception):
    """Why a code file is refused (``line N: reason``)."""


def _dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def _chain(node: ast.expr) -> list[str] | None:
    """``a.b.c`` as ``["a", "b", "c"]`` when the chain starts at a name, else ``None``."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


class _CodeChecker:
    """Walks one parsed ``code/`` file; raises :class:`CodeRefused` at the first node not allowed."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.parents: dict[ast.AST, ast.AST] = {}
        for parent in ast.walk(tree):
            for child in ast.iter_child_nodes(parent):
                self.parents[child] = parent
        self.top = {n.name for n in tree.body if isinstance(n, ast.ClassDef | ast.FunctionDef)}
        self.scopes: dict[ast.AST | None, set[str]] = {}

    def fail(self, node: ast.AST, reason: str) -> CodeRefused:
        return CodeRefused(f"line {getattr(node, 'lineno', '?')}: {reason}")

    def run(self) -> None:
        for node in ast.walk(self.tree):
            if not isinstance(node, _NODES):
                raise self.fail(node, f"{type(node).__name__} is not allowed in TorchScript code")
            if isinstance(node, ast.Import):
                if any(a.asname or not a.name.startswith("__torch__") for a in node.names):
                    raise self.fail(node, "imports something other than the archive's own __torch__ code")
            elif isinstance(node, ast.ClassDef):
                self.check_class(node)
            elif isinstance(node, ast.FunctionDef):
                if node.decorator_list or not isinstance(self.parents.get(node), ast.Module | ast.ClassDef):
                    raise self.fail(node, f"function {node.name} is decorated or nested")
            elif isinstance(node, ast.arg) and (node.arg in ROOTS | BUILTIN_NAMES or _dunder(node.arg)):
                raise self.fail(node, f"an argument shadows {node.arg}")
            elif isinstance(node, ast.Name):
                self.check_name(node)
            elif isinstance(node, ast.Attribute):
                self.check_attribute(node)
            elif isinstance(node, ast.Call):
                self.check_call(node)

    def check_class(self, node: ast.ClassDef) -> None:
        bases = [b.id if isinstance(b, ast.Name) else None for b in node.bases]
        if node.decorator_list or node.keywords or any(b not in CLASS_BASES for b in bases):
            raise self.fail(
                node, f"class {node.name}: bases, keywords or decorators TorchScript does not write"
            )

    def bound(self, node: ast.AST) -> set[str]:
        """The names the enclosing function binds (arguments, assignment and loop targets)."""
        scope = self.parents.get(node)
        while scope is not None and not isinstance(scope, ast.FunctionDef):
            scope = self.parents.get(scope)
        if scope is None:
            return set()
        if scope not in self.scopes:
            names = {a.arg for a in [*scope.args.posonlyargs, *scope.args.args, *scope.args.kwonlyargs]}
            names |= {
                n.id for n in ast.walk(scope) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
            }
            self.scopes[scope] = names
        return self.scopes[scope]

    def check_name(self, node: ast.Name) -> None:
        name = node.id
        parent = self.parents.get(node)
        if isinstance(node.ctx, ast.Store):
            in_class = isinstance(parent, ast.ClassDef) or (
                parent is not None and isinstance(self.parents.get(parent), ast.ClassDef)
            )
            class_dunder = in_class and name in CLASS_DUNDERS
            if name in ROOTS or name in BUILTIN_NAMES or (_dunder(name) and not class_dunder):
                raise self.fail(node, f"assigns to {name}")
            return
        if name in ROOTS:
            if not (isinstance(parent, ast.Attribute) and parent.value is node):
                raise self.fail(node, f"uses {name} as a value")
        elif name == "__annotations__":
            grand = self.parents.get(parent) if parent is not None else None
            if not isinstance(parent, ast.Subscript) or not isinstance(grand, ast.ClassDef | ast.Assign):
                raise self.fail(node, "uses __annotations__ outside a class attribute annotation")
        elif name not in BUILTIN_NAMES and name not in self.top and name not in self.bound(node):
            raise self.fail(node, f"name {name} is not a TorchScript builtin nor a variable of the function")

    def check_attribute(self, node: ast.Attribute) -> None:
        chain = _chain(node)
        dotted = ".".join(chain) if chain else f"….{node.attr}"
        if chain and chain[0] == "torch":
            if len(chain) == 2 and f"aten::{chain[1]}" in denied_ops():
                raise self.fail(node, f"{dotted} (aten::{chain[1]}) accesses files, processes or libraries")
            if len(chain) != 2 or (chain[1] not in ATEN_OPS and chain[1] not in TORCHSCRIPT_BUILTINS):
                raise self.fail(node, f"{dotted} is not an allowed operator")
        elif chain and chain[0] == "ops":
            if not (
                (len(chain) == 2 and chain[1] in ("prim", "aten"))
                or (len(chain) == 3 and chain[1] == "prim" and chain[2] in PRIM_OPS)
                or (len(chain) == 3 and chain[1] == "aten" and chain[2] in ATEN_OPS | TORCHSCRIPT_BUILTINS)
            ):
                raise self.fail(node, f"{dotted} is not an allowed operator")
        elif chain and chain[0] == "__torch__":
            if chain[1:3] == ["torch", "classes"] or any(_dunder(p) for p in chain[1:]):
                raise self.fail(node, f"{dotted} is not code of this archive")
        elif _dunder(node.attr) or f"aten::{node.attr}" in denied_ops():
            raise self.fail(node, f"attribute {node.attr} is not allowed ({dotted})")

    def check_call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr"):
            literal = node.args[1] if len(node.args) == 2 and not node.keywords else None
            name = literal.value if isinstance(literal, ast.Constant) else None
            if not isinstance(name, str) or _dunder(name) or f"aten::{name}" in denied_ops():
                raise self.fail(node, f"{node.func.id} needs a literal, ordinary attribute name")


def code_refusal(source: str) -> str | None:
    """Why one ``code/`` file of a TorchScript archive may not be loaded, or ``None``.

    >>> code_refusal("def f(x: Tensor) -> Tensor:\\n  return torch.relu(x)\\n") is None
    True
    >>> code_refusal("def f(x: Tensor) -> Tensor:\\n  t = torch . from_file('/etc/passwd')\\n  return x\\n")
    'line 2: torch.from_file (aten::from_file) accesses files, processes or libraries'
    """
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        return f"is not parseable code ({type(exc).__name__})"
    try:
        _CodeChecker(tree).run()
    except CodeRefused as exc:
        return str(exc)
    except RecursionError:
        return "is nested too deeply"
    return None


def check_torchscript_archive(path: Path) -> None:
    """Raise :class:`ModelError` naming the member and the reason unless every code file and every
    pickle of the archive passes; nothing is loaded."""
    with open_checked(path) as zf:
        for info in zf.infolist():
            name = info.filename
            if "/code/" in f"/{name}" and name.endswith(".py"):
                try:
                    source = read_member(zf, info, path).decode("utf-8")
                except UnicodeDecodeError:
                    raise refuse(path, name, "is not UTF-8 text") from None
                reason = code_refusal(source)
            elif name.endswith("pkl"):  # data.pkl, constants.pkl, *.debug_pkl, bytecode.pkl …
                reason = pickle_refusal(read_member(zf, info, path), TORCHSCRIPT_POLICY)
            else:
                continue
            if reason:
                raise refuse(path, name, reason)


def _denied_ops() -> frozenset[str]:
    """The fixed denylist plus every registered ``aten``/``prim`` operator that takes a file-like string."""
    denied = set(TORCHSCRIPT_DENIED_OPS)
    for schema in torch._C._jit_get_all_schemas():
        if schema.name.split("::", 1)[0] not in TORCHSCRIPT_NAMESPACES:
            continue
        for arg in schema.arguments:
            file_like = any(k in arg.name.lower() for k in _FILE_ARGUMENTS)
            if file_like and str(arg.type) in ("str", "Optional[str]"):
                denied.add(schema.name)
    return frozenset(denied)


_DENIED: frozenset[str] | None = None


def denied_ops() -> frozenset[str]:
    global _DENIED
    if _DENIED is None:
        _DENIED = _denied_ops()
    return _DENIED


def torchscript_refusal(op: str) -> str | None:
    """Why operator ``op`` (``namespace::name``) may not run in a candidate model, or ``None``."""
    namespace = op.split("::", 1)[0]
    if namespace not in TORCHSCRIPT_NAMESPACES:
        allowed = ", ".join(sorted(TORCHSCRIPT_NAMESPACES))
        return f"operator {op} is outside the allowed namespaces ({allowed})"
    if op in denied_ops():
        return f"operator {op} accesses files, processes or libraries"
    return None


def check_torchscript_ops(module: torch.jit.ScriptModule, source: str) -> None:
    """Refuse a loaded TorchScript module any of whose methods (of any submodule, calls inlined) uses an
    operator outside :data:`TORCHSCRIPT_NAMESPACES` or in the denylist; the error names the operator."""
    seen: set[str] = set()
    for sub in [module, *module.modules()]:
        c = getattr(sub, "_c", None)
        if c is None:
            continue
        for method_name in c._method_names():
            graph = c._get_method(method_name).graph.copy()
            torch._C._jit_pass_inline(graph)
            stack = list(graph.nodes())
            while stack:
                node = stack.pop()
                kind = node.kind()
                if kind not in seen:
                    seen.add(kind)
                    reason = torchscript_refusal(kind)
                    if reason:
                        where = f"{sub.original_name}.{method_name}"
                        raise ModelError(f"{source}: refused: {reason} (in {where})")
                for block in node.blocks():
                    stack.extend(block.nodes())


def load_torchscript(path: str | Path) -> torch.nn.Module:
    """A TorchScript module, after its code and pickles (before loading) and its graphs (after) passed."""

    path = Path(path)
    if not path.is_file():
        raise ModelError(f"{path}: no such file")
    kind = inspect_model_file(path)
    if kind in ("pickled_model", "pickle"):
        raise ModelError(f"{path}: refused: this is a pickled whole model, not TorchScript. {EXPORT_HINT}")
    if kind in ("safetensors", "state_dict"):
        raise ModelError(
            f"{path}: this holds weights only ({kind}); give model.arch and model.weights instead"
        )
    if kind == "export":
        raise ModelError(
            f"{path}: a torch.export program is evaluated, not retrained: give it as a checkpoint "
            "of clgate evaluate"
        )
    if kind != "torchscript":
        raise ModelError(f"{path}: not a TorchScript file (save one with torch.jit.save)")
    check_torchscript_archive(path)
    try:
        with warnings.catch_warnings():  # TorchScript is deprecated upstream but is what candidates ship as
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            module = torch.jit.load(str(path), map_location="cpu")
    except Exception as exc:
        raise ModelError(f"{path}: cannot load TorchScript ({exc})") from None
    check_torchscript_ops(module, path.name)
    return module


__all__ = [
    "TORCHSCRIPT_DENIED_OPS",
    "TORCHSCRIPT_NAMESPACES",
    "check_torchscript_archive",
    "check_torchscript_ops",
    "code_refusal",
    "load_torchscript",
    "torchscript_refusal",
]
