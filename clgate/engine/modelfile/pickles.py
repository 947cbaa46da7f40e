"""Pickles judged from their opcodes, never unpickled.

:func:`pickle_refusal` runs a small abstract interpreter over ``pickletools.genops`` (which decodes
opcodes without executing any): it keeps a stack and a memo of *what kind* of value each slot holds
(a string, a global, an object built by an allowed call, anything else), so that a global named
through memoised strings (``BINGET`` of a string put aside earlier, the trick that fools a scanner
remembering "the last two strings") is resolved exactly as the unpickler would resolve it.

A pickle passes only when every global it names is in its :class:`PicklePolicy` and every opcode that
calls something (``REDUCE``, ``NEWOBJ``, ``BUILD``) calls an allowed callable or class. ``INST``,
``OBJ``, ``NEWOBJ_EX`` and the ``EXT*`` registry lookups are refused outright: neither ``torch.save``
nor ``torch.jit.save`` writes them.
"""

from __future__ import annotations

import io
import pickletools
from collections.abc import Callable
from dataclasses import dataclass, field

# Storage classes: named as values inside a persistent id ("storage", FloatStorage, key, device, n).
STORAGE_TYPES = frozenset(
    f"torch.{n}Storage"
    for n in (
        "Float", "Double", "Half", "BFloat16", "Long", "Int", "Short", "Char", "Byte", "Bool",
        "ComplexFloat", "ComplexDouble", "Untyped",
    )
)  # fmt: skip

# torch.save of tensors, parameters and (ordered) dicts of them: what torch's weights_only loader builds.
STATE_DICT_CALLABLES = frozenset(
    {
        "torch._utils._rebuild_tensor_v2",
        "torch._utils._rebuild_parameter",
        "collections.OrderedDict",
        "torch.Size",
        "torch.device",
    }
)

# torch.jit.save: the C++ unpickler's own helpers; script classes are built with NEWOBJ + BUILD.
TORCHSCRIPT_CALLABLES = STATE_DICT_CALLABLES | frozenset(
    {
        "torch.jit._pickle.build_intlist",
        "torch.jit._pickle.build_doublelist",
        "torch.jit._pickle.build_boollist",
        "torch.jit._pickle.build_tensorlist",
        "torch.jit._pickle.build_tensor_from_id",
        "torch.jit._pickle.restore_type_tag",
    }
)

_STRING_OPS = frozenset(
    {"SHORT_BINUNICODE", "BINUNICODE", "UNICODE", "BINUNICODE8", "SHORT_BINSTRING", "BINSTRING", "STRING"}
)
_MEMO_PUT = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})
_MEMO_GET = frozenset({"GET", "BINGET", "LONG_BINGET"})
_REFUSED = {
    "INST": "INST builds an instance of any class by name",
    "OBJ": "OBJ builds an instance of any class",
    "NEWOBJ_EX": "NEWOBJ_EX builds an instance of any class",
    "EXT1": "EXT1 names a global through the copyreg extension registry",
    "EXT2": "EXT2 names a global through the copyreg extension registry",
    "EXT4": "EXT4 names a global through the copyreg extension registry",
}
# Opcodes that pop everything down to the last MARK and push one value (or nothing).
_POP_MARK_PUSH = frozenset({"TUPLE", "LIST", "DICT", "FROZENSET"})
_POP_MARK_ONLY = frozenset({"APPENDS", "SETITEMS", "ADDITEMS", "POP_MARK"})
_PUSH_ONE = frozenset(
    {
        "INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "FLOAT", "BINFLOAT",
        "NONE", "NEWTRUE", "NEWFALSE", "EMPTY_TUPLE", "EMPTY_LIST", "EMPTY_DICT", "EMPTY_SET",
        "BINBYTES", "SHORT_BINBYTES", "BINBYTES8", "BYTEARRAY8",
    }
)  # fmt: skip
_TUPLE_N = {"TUPLE1": 1, "TUPLE2": 2, "TUPLE3": 3}
_MAX_OPS = 50_000_000


class PickleRefused(Exception):
    """Why a pickle is refused (the message is the reason, in words)."""


@dataclass(frozen=True)
class PicklePolicy:
    """What a pickle may name: callables (``REDUCE``), plain values, and classes built by ``NEWOBJ``."""

    callables: frozenset[str]
    values: frozenset[str] = STORAGE_TYPES
    is_class: Callable[[str], bool] = field(default=lambda name: False)
    build_on: frozenset[str] = frozenset({"collections.OrderedDict"})

    def kind(self, name: str) -> str | None:
        if name in self.callables:
            return "callable"
        if name in self.values:
            return "value"
        if self.is_class(name):
            return "class"
        return None


STATE_DICT_POLICY = PicklePolicy(callables=STATE_DICT_CALLABLES)
TORCHSCRIPT_POLICY = PicklePolicy(
    callables=TORCHSCRIPT_CALLABLES,
    is_class=lambda name: name.startswith("__torch__.") and ".torch.classes." not in f".{name}",
)


@dataclass(frozen=True)
class _V:
    """An abstract stack value: its kind and, for strings and globals, its text."""

    kind: str  # "str", "global", "obj" (built by an allowed call), "any", "mark"
    text: str = ""


_MARK = _V("mark")
_ANY = _V("any")


class _Machine:
    def __init__(self, policy: PicklePolicy) -> None:
        self.policy = policy
        self.stack: list[_V] = []
        self.memo: dict[int, _V] = {}

    def pop(self) -> _V:
        if not self.stack or self.stack[-1] is _MARK:
            raise PickleRefused("malformed pickle: stack underflow")
        return self.stack.pop()

    def pop_mark(self) -> list[_V]:
        items: list[_V] = []
        while self.stack and self.stack[-1] is not _MARK:
            items.append(self.stack.pop())
        if not self.stack:
            raise PickleRefused("malformed pickle: no MARK")
        self.stack.pop()
        return items

    def global_(self, module: str, name: str) -> _V:
        full = f"{module}.{name}"
        if "\n" in full or self.policy.kind(full) is None:
            raise PickleRefused(f"names the global {full}, which is not allowed")
        return _V("global", full)

    def call(self, opcode: str, target: _V) -> _V:
        wanted = "class" if opcode == "NEWOBJ" else "callable"
        if target.kind != "global" or self.policy.kind(target.text) != wanted:
            what = target.text or f"a computed {target.kind} value"
            raise PickleRefused(f"{opcode} calls {what}, which is not allowed")
        return _V("obj", target.text)

    def step(self, name: str, arg: object) -> None:
        s = self.stack
        if name in _REFUSED:
            raise PickleRefused(_REFUSED[name])
        if name in _STRING_OPS:
            s.append(_V("str", str(arg)))
        elif name in _PUSH_ONE:
            s.append(_ANY)
        elif name == "MARK":
            s.append(_MARK)
        elif name == "GLOBAL":
            module, _, attr = str(arg).partition(" ")
            s.append(self.global_(module, attr))
        elif name == "STACK_GLOBAL":
            attr_value, module_value = self.pop(), self.pop()
            if module_value.kind != "str" or attr_value.kind != "str":
                raise PickleRefused("STACK_GLOBAL names a global with computed (non-string) values")
            s.append(self.global_(module_value.text, attr_value.text))
        elif name in ("REDUCE", "NEWOBJ"):
            self.pop()  # arguments: anything on the stack was built from allowed names only
            s.append(self.call(name, self.pop()))
        elif name == "BUILD":
            self.pop()
            target = self.pop()
            if target.kind != "obj" or not (
                target.text in self.policy.build_on or self.policy.kind(target.text) == "class"
            ):
                what = target.text or target.kind
                raise PickleRefused(f"BUILD sets the state of {what}, which is not allowed")
            s.append(target)
        else:
            self.memo_or_structure(name, arg)

    def memo_or_structure(self, name: str, arg: object) -> None:
        s = self.stack
        if name in _MEMO_PUT or name == "MEMOIZE":
            if not s or s[-1] is _MARK:
                raise PickleRefused("malformed pickle: memoising an empty stack")
            self.memo[len(self.memo) if name == "MEMOIZE" else int(arg)] = s[-1]  # type: ignore[call-overload]
        elif name in _MEMO_GET:
            if int(arg) not in self.memo:  # type: ignore[call-overload]
                raise PickleRefused(f"{name} reads memo slot {arg}, which was never written")
            s.append(self.memo[int(arg)])  # type: ignore[call-overload]
        elif name in _POP_MARK_PUSH:
            self.pop_mark()
            s.append(_ANY)
        elif name in _POP_MARK_ONLY:
            self.pop_mark()
        elif name in _TUPLE_N:
            for _ in range(_TUPLE_N[name]):
                self.pop()
            s.append(_ANY)
        elif name in ("APPEND", "POP"):
            self.pop()
        elif name == "SETITEM":
            self.pop()
            self.pop()
        elif name == "DUP":
            s.append(self.pop())
            s.append(s[-1])
        elif name in ("PERSID", "BINPERSID"):
            if name == "BINPERSID":
                self.pop()
            s.append(_ANY)  # torch's persistent_load: storages only
        elif name in ("PROTO", "FRAME", "STOP"):
            pass
        else:
            raise PickleRefused(f"uses the opcode {name}, which is not allowed")


def pickle_refusal(payload: bytes, policy: PicklePolicy) -> str | None:
    """Why ``payload`` may not be unpickled under ``policy``, or ``None`` when it may.

    >>> import pickle
    >>> pickle_refusal(pickle.dumps({"a": [1, 2.0, "x"]}), STATE_DICT_POLICY) is None
    True
    >>> pickle_refusal(pickle.dumps(print), STATE_DICT_POLICY)
    'names the global builtins.print, which is not allowed'
    """
    machine = _Machine(policy)
    try:
        for n_ops, (opcode, arg, _pos) in enumerate(pickletools.genops(io.BytesIO(payload)), 1):
            if n_ops > _MAX_OPS:
                return "too many opcodes"
            machine.step(opcode.name, arg)
            if opcode.name == "STOP":
                return None
    except PickleRefused as exc:
        return str(exc)
    except (ValueError, TypeError) as exc:  # genops on bytes that are not a pickle
        return f"not a readable pickle ({exc})"
    return "not a complete pickle (no STOP)"


def torch_save_refusal(payload: bytes, policy: PicklePolicy = STATE_DICT_POLICY) -> str | None:
    """Why a ``torch.save`` zip held in memory (a member of a ``.pt2``) may not be loaded, or ``None``.

    Every pickle inside (``data.pkl`` and any other ``.pkl``) must pass :func:`pickle_refusal`.
    """
    import zipfile

    try:
        with zipfile.ZipFile(io.BytesIO(payload)) as inner:
            names = inner.namelist()
            if len(set(names)) != len(names):
                return "has a member name twice (torch and Python could read different copies)"
            if any(n.endswith("constants.pkl") or "/code/" in f"/{n}" for n in names):
                return "is a TorchScript archive, which torch.load would hand to torch.jit.load"
            pickles = [n for n in names if n.endswith(".pkl")]
            if not any(n == "data.pkl" or n.endswith("/data.pkl") for n in pickles):
                return "is a zip without data.pkl, not a torch.save file"
            for name in pickles:
                if inner.getinfo(name).file_size > 1 << 29:
                    return f"{name} is larger than 512 MiB"
                reason = pickle_refusal(inner.read(name), policy)
                if reason:
                    return f"{name} {reason}"
    except (zipfile.BadZipFile, OSError, RuntimeError, EOFError) as exc:
        return f"is not a readable torch.save file ({exc})"
    return None
