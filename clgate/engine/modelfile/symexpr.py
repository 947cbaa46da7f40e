"""Symbolic shape expressions of a ``.pt2`` file, judged without sympy.

``torch.export.load`` hands every ``expr_str`` of ``model.json`` to ``sympy.sympify``, which ends in
Python's ``eval``: a string there is code. :func:`sym_expr_refusal` parses it with :mod:`ast` (parsing
runs nothing) and accepts only plain integer arithmetic of symbols, in the two spellings torch writes:

- ``srepr`` form, what torch 2.x saves: ``Symbol('s77', positive=True, integer=True)``, ``Integer(3)``,
  ``Add(...)``, ``Mul(...)``, ``Pow(base, exponent)`` and the integer functions below;
- infix form: ``s0 + 2*s1``, ``s0 // 2``, ``-s1``, ``s0 % 4``, ``s0**2``.

Sizes are bounded so that sympy's own arithmetic stays small: at most 4096 characters and 2000 parts,
integer literals up to 2**63, literal exponents 0..64, at most two powers.

The call forms are sympy classes (and ``torch.utils._sympy.functions`` classes, which torch passes to
sympify as names) that compute an integer from integers and nothing else: sums, products, powers,
minimum/maximum, floor/ceil division and the modulo forms. Everything else — attributes, subscripts,
strings outside ``Symbol``'s name, lambdas, comprehensions, any other name — is refused, and so is a
text with a character outside letters, digits, ``_``, spaces and ``()+-*/%,='``.
"""

from __future__ import annotations

import ast
import re

# Call forms, by name → (least, most) positional arguments (None: no upper bound).
ARITHMETIC_CALLS: dict[str, tuple[int, int | None]] = {
    "Integer": (1, 1),
    "Add": (2, None),
    "Mul": (2, None),
    "Pow": (2, 2),
    "Max": (2, None),
    "Min": (2, None),
    "FloorDiv": (2, 2),
    "CeilDiv": (2, 2),
    "CleanDiv": (2, 2),
    "Mod": (2, 2),
    "PythonMod": (2, 2),
    "ModularIndexing": (3, 3),
    "PowByNatural": (2, 2),
}
# Assumptions ``Symbol`` may carry (what torch's shape environment writes); each must be a bool literal.
SYMBOL_ASSUMPTIONS = frozenset(
    {"integer", "positive", "nonnegative", "negative", "nonpositive", "real", "finite"}
)
SYMBOL_NAME = re.compile(r"[a-z]{1,4}[0-9]{1,9}")
_CHARSET = re.compile(r"[A-Za-z0-9_ ()+\-*/%,=']*")
_MAX_LEN = 4096
_MAX_NODES = 2000
_MAX_INT = 2**63
_MAX_EXPONENT = 64
_MAX_POWERS = 2
_OPERATORS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod, ast.Pow)


class SymExprRefused(ValueError):
    """Why a symbolic expression is refused."""


def sym_expr_refusal(text: object) -> str | None:
    """Why ``text`` is not plain integer arithmetic of symbols, or ``None`` when it is.

    >>> sym_expr_refusal("Symbol('s77', positive=True, integer=True)") is None
    True
    >>> sym_expr_refusal("Add(Mul(Integer(2), Symbol('s0', integer=True)), Integer(1))") is None
    True
    >>> sym_expr_refusal("s0 + 2*s1 // 3") is None
    True
    >>> sym_expr_refusal("__import__('os').system('id')")
    "character '.' is not allowed"
    >>> sym_expr_refusal("Function('f', s0)")
    'calls Function, which is not integer arithmetic'
    """
    try:
        check_sym_expr(text)
    except SymExprRefused as exc:
        return str(exc)
    return None


def check_sym_expr(text: object) -> None:
    """Raise :class:`SymExprRefused` unless ``text`` is plain integer arithmetic of symbols."""
    if not isinstance(text, str):
        raise SymExprRefused(f"is a {type(text).__name__}, not a string")
    if len(text) > _MAX_LEN:
        raise SymExprRefused(f"is longer than {_MAX_LEN} characters")
    bad = [c for c in text if not _CHARSET.fullmatch(c)]
    if bad:
        raise SymExprRefused(f"character {bad[0]!r} is not allowed")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        raise SymExprRefused(f"is not an expression ({type(exc).__name__})") from None
    nodes = list(ast.walk(tree))
    if len(nodes) > _MAX_NODES:
        raise SymExprRefused(f"has more than {_MAX_NODES} parts")
    powers = sum(1 for n in nodes if _is_power(n))
    if powers > _MAX_POWERS:  # nested powers grow the integers sympy would compute without bound
        raise SymExprRefused(f"has more than {_MAX_POWERS} powers")
    _check(tree.body, depth=0)


def _is_power(node: ast.AST) -> bool:
    if isinstance(node, ast.BinOp):
        return isinstance(node.op, ast.Pow)
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("Pow", "PowByNatural")
    )


def _check(node: ast.expr, depth: int) -> None:
    if depth > 100:
        raise SymExprRefused("is nested too deeply")
    if isinstance(node, ast.Constant):
        _check_int(node.value)
    elif isinstance(node, ast.Name):
        if not SYMBOL_NAME.fullmatch(node.id):
            raise SymExprRefused(f"name {node.id!r} is not a plain symbol (like s0)")
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        _check(node.operand, depth + 1)
    elif isinstance(node, ast.BinOp) and isinstance(node.op, _OPERATORS):
        _check(node.left, depth + 1)
        if isinstance(node.op, ast.Pow):
            _check_exponent(node.right)
        _check(node.right, depth + 1)
    elif isinstance(node, ast.Call):
        _check_call(node, depth)
    else:
        raise SymExprRefused(f"{type(node).__name__} is not integer arithmetic")


def _check_int(value: object) -> None:
    if type(value) is not int:  # bool, float, str, bytes, None, Ellipsis …
        raise SymExprRefused(f"literal {value!r} is not an integer")
    if abs(value) > _MAX_INT:
        raise SymExprRefused("an integer literal is larger than 2**63")


def _check_exponent(node: ast.expr) -> None:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Integer":
        node = node.args[0] if node.args else node
    if isinstance(node, ast.Constant) and type(node.value) is int and not 0 <= node.value <= _MAX_EXPONENT:
        raise SymExprRefused(f"an exponent is outside 0..{_MAX_EXPONENT}")


def _check_call(node: ast.Call, depth: int) -> None:
    if not isinstance(node.func, ast.Name):
        raise SymExprRefused(f"calls a computed {type(node.func).__name__}, which is not integer arithmetic")
    name = node.func.id
    if name == "Symbol":
        _check_symbol(node)
        return
    if name not in ARITHMETIC_CALLS:
        raise SymExprRefused(f"calls {name}, which is not integer arithmetic")
    least, most = ARITHMETIC_CALLS[name]
    if node.keywords or not least <= len(node.args) <= (most if most is not None else len(node.args)):
        raise SymExprRefused(f"{name} takes {least}{'' if most == least else '+'} positional arguments")
    if name == "Integer" and not isinstance(node.args[0], ast.Constant | ast.UnaryOp):
        raise SymExprRefused("Integer takes an integer literal")
    if name in ("Pow", "PowByNatural"):
        _check_exponent(node.args[1])
    for arg in node.args:
        _check(arg, depth + 1)


def _check_symbol(node: ast.Call) -> None:
    if len(node.args) != 1 or not isinstance(node.args[0], ast.Constant):
        raise SymExprRefused("Symbol takes one name")
    name = node.args[0].value
    if not isinstance(name, str) or not SYMBOL_NAME.fullmatch(name):
        raise SymExprRefused(f"Symbol name {name!r} is not a plain symbol (like s0)")
    for kw in node.keywords:
        if kw.arg not in SYMBOL_ASSUMPTIONS:
            raise SymExprRefused(f"Symbol assumption {kw.arg!r} is not allowed")
        if not isinstance(kw.value, ast.Constant) or type(kw.value.value) is not bool:
            raise SymExprRefused(f"Symbol assumption {kw.arg} must be True or False")
