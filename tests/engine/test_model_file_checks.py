"""The three judges of :mod:`clgate.engine.modelfile`, one by one: the pickle opcode interpreter, the
symbolic-expression parser (with a bounded hypothesis fuzz: random expressions never evaluate anything)
and the TorchScript code checker."""

from __future__ import annotations

import ast
import io
import json
import pickle
import sys
import zipfile

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clgate.engine.modelfile import STATE_DICT_POLICY, TORCHSCRIPT_POLICY, code_refusal, pickle_refusal
from clgate.engine.modelfile.symexpr import ARITHMETIC_CALLS, sym_expr_refusal
from tests.fixtures.model_attacks import memo_trick_pickle, open_pickle


# ---------------------------------------------------------------------- pickles
def _data_pkl(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as zf:
        return zf.read(next(n for n in zf.namelist() if n.endswith("data.pkl")))


def test_torch_save_of_tensors_parameters_and_state_dicts_passes():
    from clgate.engine.models import build_model

    model = build_model("resnet18-slim", (3, 8, 8), 4)
    for obj in (model.state_dict(), {"w": torch.nn.Parameter(torch.ones(2))}, (torch.zeros(3), {})):
        assert pickle_refusal(_data_pkl(obj), STATE_DICT_POLICY) is None


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        pytest.param(open_pickle("/x"), "names the global builtins.open", id="global"),
        pytest.param(memo_trick_pickle("/x"), "names the global builtins.open", id="memo-trick"),
        pytest.param(pickle.dumps(print, protocol=4), "names the global builtins.print", id="stack-global"),
        pytest.param(b"\x80\x02(S'id'\nios\nsystem\n.", "INST builds", id="inst"),
        pytest.param(b"\x80\x02(ctorch\nFloatStorage\no.", "OBJ builds", id="obj"),
        pytest.param(b"\x80\x02\x82\x01.", "EXT1", id="ext1"),
        pytest.param(
            b"\x80\x02ctorch\nFloatStorage\n)R.", "REDUCE calls torch.FloatStorage", id="reduce-value"
        ),
        pytest.param(b"\x80\x04N\x94h\x00h\x00\x93.", "computed", id="stack-global-not-strings"),
        pytest.param(b"\x80\x02h\x05.", "never written", id="unknown-memo"),
        pytest.param(
            b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n}b.", "BUILD sets the state of", id="build-on-global"
        ),
        pytest.param(b"\x80\x02N", "STOP", id="truncated"),
        pytest.param(b"not a pickle", "not a readable pickle", id="garbage"),
    ],
)
def test_pickles_that_would_run_anything_are_refused(payload, reason):
    refusal = pickle_refusal(payload, STATE_DICT_POLICY)
    assert refusal is not None and reason in refusal, refusal


def test_script_classes_are_allowed_only_in_torchscript_pickles():
    payload = b"\x80\x02c__torch__.M\nM\n)\x81}b."  # NEWOBJ + BUILD, what torch.jit.save writes
    assert pickle_refusal(payload, TORCHSCRIPT_POLICY) is None
    assert "__torch__.M" in pickle_refusal(payload, STATE_DICT_POLICY)
    custom = b"\x80\x02c__torch__.torch.classes.ns.C\nC\n)\x81."  # a C++ custom class: not the archive's code
    assert "not allowed" in pickle_refusal(custom, TORCHSCRIPT_POLICY)


# ---------------------------------------------------------------------- symbolic expressions
@pytest.mark.parametrize(
    "text",
    [
        "Symbol('s77', positive=True, integer=True)",
        "Add(Mul(Integer(2), Symbol('s0', integer=True)), Integer(-1))",
        "FloorDiv(Symbol('s0', integer=True), Integer(2))",
        "Max(Integer(1), Symbol('u0', integer=True))",
        "Pow(Symbol('s1', integer=True), Integer(2))",
        "s0 + 2*s1 - s2 // 3 % 4",
        "-s0",
        "7",
    ],
)
def test_integer_arithmetic_of_symbols_passes(text):
    assert sym_expr_refusal(text) is None


@pytest.mark.parametrize(
    "text",
    [
        "__import__('os').system('id')",
        "open('/tmp/x', 'w') and Symbol('s0')",
        "Symbol('s0').__class__",
        "Function('f', s0)",
        "lambda: 0",
        "[s for s in s0]",
        "s0[0]",
        "Symbol('__import__')",
        "Symbol('s0', evaluate=True)",
        "Symbol('s0', integer=1)",
        "eval('1')",
        "exec",
        "Integer(s0)",
        "Pow(Integer(10), Integer(100000))",
        "10 ** 100000",
        "Pow(Pow(Pow(Integer(9223372036854775807), 64), 64), 64)",
        "((s0 ** 64) ** 64) ** 64",
        "1.5",
        "True",
        "'s0'",
        "s0 if s1 else s2",
        "s0 < s1",
        "s0 / s1",
        "s0; s1",
        "s\N{LATIN SMALL LIGATURE FI}0",
        "(" * 300 + "s0" + ")" * 300,
        12,
        None,
    ],
)
def test_anything_else_is_refused(text):
    assert sym_expr_refusal(text) is not None


_DANGEROUS_NAMES = ["__import__", "eval", "exec", "open", "getattr", "Function", "lambdify", "os", "S"]
_ALLOWED_CALLS = ["Symbol", *ARITHMETIC_CALLS]


def _expressions() -> st.SearchStrategy[ast.expr]:
    leaves = st.one_of(
        st.integers(-(2**70), 2**70).map(lambda v: ast.Constant(v)),
        st.sampled_from(["s0", "s1", "u3", "x", "_", *_DANGEROUS_NAMES]).map(lambda n: ast.Name(n)),
        st.sampled_from(["s0", "os", "1.5", "", "/tmp/x"]).map(lambda v: ast.Constant(v)),
        st.sampled_from([True, None, 1.5, b"x"]).map(lambda v: ast.Constant(v)),
    )

    def extend(children: st.SearchStrategy[ast.expr]) -> st.SearchStrategy[ast.expr]:
        ops = [ast.Add(), ast.Sub(), ast.Mult(), ast.FloorDiv(), ast.Mod(), ast.Pow(), ast.Div(), ast.BitOr()]
        call = st.builds(
            lambda f, args, kw: ast.Call(ast.Name(f), args, kw),
            st.sampled_from(_ALLOWED_CALLS + _DANGEROUS_NAMES),
            st.lists(children, max_size=3),
            st.lists(
                st.builds(ast.keyword, st.sampled_from(["integer", "positive", "evaluate"]), children),
                max_size=2,
            ),
        )
        return st.one_of(
            st.builds(ast.BinOp, children, st.sampled_from(ops), children),
            st.builds(ast.UnaryOp, st.sampled_from([ast.USub(), ast.Not(), ast.Invert()]), children),
            call,
            st.builds(ast.Attribute, children, st.sampled_from(["__class__", "system", "real"])),
            st.builds(ast.Subscript, children, children),
            st.builds(lambda body: ast.Lambda(ast.arguments([], [], None, [], [], None, []), body), children),
            st.builds(lambda a, b: ast.BoolOp(ast.And(), [a, b]), children, children),
            st.builds(lambda a, b: ast.Compare(a, [ast.Lt()], [b]), children, children),
        )

    return st.recursive(leaves, extend, max_leaves=12)


@pytest.fixture(scope="module")
def events():
    """Audit events (exec, import, open, process) raised while the parser runs: it must raise none."""
    seen: list[str] = []
    state = {"on": False}

    def hook(event: str, args) -> None:
        if state["on"] and event in (
            "exec",
            "import",
            "open",
            "os.system",
            "subprocess.Popen",
            "builtins.input",
        ):
            seen.append(event)

    sys.addaudithook(hook)  # cannot be removed; inert unless "on"
    return seen, state


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=_expressions())
def test_random_expressions_never_evaluate_anything(tree, events, monkeypatch):
    import sympy

    def forbidden(*args, **kwargs):
        raise AssertionError("sympy was asked to parse a candidate's expression")

    monkeypatch.setattr(sympy, "sympify", forbidden)
    text = ast.unparse(ast.fix_missing_locations(ast.Expression(tree)))
    seen, state = events
    state["on"] = True
    try:
        refusal = sym_expr_refusal(text)
    finally:
        state["on"] = False
    assert seen == [], (text, seen)
    if refusal is None:  # what passes is arithmetic: no attribute, subscript, lambda, boolean or string use
        for node in ast.walk(ast.parse(text, mode="eval")):
            assert not isinstance(node, ast.Attribute | ast.Subscript | ast.Lambda | ast.BoolOp | ast.Compare)
            if isinstance(node, ast.Call):
                assert node.func.id in _ALLOWED_CALLS  # type: ignore[attr-defined]
            if isinstance(node, ast.Name):
                assert node.id not in _DANGEROUS_NAMES


# ---------------------------------------------------------------------- TorchScript code
_HEADER = "class M(Module):\n  training : bool\n  def forward(self: __torch__.M, x: Tensor) -> Tensor:\n"


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        pytest.param("    t = torch . from_file('/etc/passwd')", "aten::from_file", id="spaced-from-file"),
        pytest.param("    t = ops . aten . save(x, '/tmp/x')", "ops.aten.save", id="ops-aten-save"),
        pytest.param("    t = ops.prim.Print(x)", "ops.prim.Print", id="prim-print"),
        pytest.param("    print(x)", "name print", id="print"),
        pytest.param("    f = getattr(torch, 'from_' + 'file')", "getattr needs", id="getattr-torch"),
        pytest.param("    f = getattr(self, 'from_' + 'file')", "literal, ordinary", id="getattr-computed"),
        pytest.param("    f = getattr(self, '__class__')", "literal, ordinary", id="getattr-dunder"),
        pytest.param("    f = x.__class__", "attribute __class__", id="dunder-attribute"),
        pytest.param("    f = __import__('os')", "name __import__", id="import-call"),
        pytest.param("    import os", "imports something", id="import"),
        pytest.param("    f = lambda: 0", "Lambda", id="lambda"),
        pytest.param("    f = torch.jit.load('/x')", "torch.jit", id="nested-torch"),
        pytest.param("    f = torch.ops.aten.from_file('/x')", "torch.ops", id="torch-ops-aten"),
        pytest.param("    f = ops.aten.from_file('/x')", "ops.aten.from_file", id="ops-aten-from-file"),
        pytest.param("    f = ops.my_ns.spawn('/x')", "ops.my_ns", id="other-namespace"),
        pytest.param("    f = x.save('/x')", "attribute save", id="method-save"),
        pytest.param("    f = eval('1')", "name eval", id="eval"),
        pytest.param("    torch = x", "assigns to torch", id="rebind-root"),
        pytest.param(
            "    def g(torch: Tensor) -> Tensor:\n      return torch.relu(x)", "nested", id="nested"
        ),
        pytest.param(
            "    f = __torch__.torch.classes.ns.Evil()", "not code of this archive", id="custom-class"
        ),
        pytest.param("    f = unknown_global", "name unknown_global", id="free-name"),
        pytest.param("    with x:\n      pass", "With", id="with"),
    ],
)
def test_code_that_reaches_outside_the_tensor_maths_is_refused(body, reason):
    refusal = code_refusal(_HEADER + body + "\n    return x\n")
    assert refusal is not None and reason in refusal, refusal


def test_hooks_and_setstate_are_checked_like_any_method():
    source = (
        'class M(Module):\n  __forward_pre_hooks__ = ["hook", ]\n  training : bool\n'
        "  def hook(self: __torch__.M, inputs: Tuple[Tensor]) -> Tuple[Tensor]:\n"
        '    t = torch.from_file("/x", True, 4)\n    return inputs\n'
    )
    assert "line 5: torch.from_file" in code_refusal(source)
    assert "line 5" in code_refusal(source.replace("def hook", "def __setstate__"))
    assert code_refusal(source.replace('torch.from_file("/x", True, 4)', "torch.relu(inputs[0])")) is None


def test_an_argument_may_not_shadow_a_root_or_builtin():
    assert "shadows torch" in code_refusal("def f(torch: Tensor) -> Tensor:\n  return torch.relu(torch)\n")
    assert "shadows getattr" in code_refusal("def f(getattr: int) -> int:\n  return getattr\n")


def test_a_class_with_another_base_is_refused():
    assert "bases" in code_refusal("class M(os.PathLike):\n  pass\n")


# ---------------------------------------------------------------------- .pt2 archives
def test_a_member_any_configuration_calls_pickled_is_judged_as_a_pickle(tmp_path):
    from clgate.engine.errors import ModelError
    from clgate.engine.modelfile import check_export_archive
    from clgate.engine.models import build_model
    from tests.fixtures.model_attacks import export_program

    honest = export_program(build_model("mlp", (8,), 6, hidden=16), tmp_path / "honest.pt2")
    check_export_archive(honest)
    second = json.dumps({"config": {"x": {"path_name": "weight_0", "use_pickle": True}}})
    with zipfile.ZipFile(honest) as zin, zipfile.ZipFile(tmp_path / "two.pt2", "w") as zout:
        for info in zin.infolist():
            zout.writestr(info, zin.read(info))
        zout.writestr("honest/data/weights/other_weights_config.json", second)
    with pytest.raises(ModelError, match=r"honest/data/weights/weight_0: .*nor a torch.save file"):
        check_export_archive(tmp_path / "two.pt2")


def test_a_name_twice_in_the_archive_is_refused(tmp_path):
    from clgate.engine.errors import ModelError
    from clgate.engine.modelfile import check_export_archive

    path = tmp_path / "twice.pt2"
    with zipfile.ZipFile(path, "w") as zf, pytest.warns(UserWarning, match="Duplicate name"):
        zf.writestr("m/archive_format", "pt2")
        zf.writestr("m/archive_format", "pt2")
    with pytest.raises(ModelError, match="m/archive_format: appears twice"):
        check_export_archive(path)


def test_a_torchscript_archive_inside_a_pt2_is_refused(tmp_path):
    """torch retries a failed weights_only load of the sample inputs without it, and torch.load hands a
    TorchScript zip to torch.jit.load: a scripted module there would run its __setstate__."""
    from clgate.engine.modelfile.pickles import torch_save_refusal

    buf = io.BytesIO()
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), buf)
    assert "TorchScript archive" in torch_save_refusal(buf.getvalue())


@pytest.mark.parametrize("prefix", ["opaque_obj_", "custom_obj_"])
def test_a_constant_that_is_not_a_tensor_is_refused(tmp_path, prefix):
    """opaque_obj_* constants are read with pickle.loads, custom_obj_* with TorchScript's unpickler."""
    from clgate.engine.errors import ModelError
    from clgate.engine.modelfile import check_export_archive
    from tests.fixtures.model_attacks import export_program

    class WithConstant(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c = torch.ones(8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.c

    honest = export_program(WithConstant(), tmp_path / "c.pt2")
    check_export_archive(honest)
    with zipfile.ZipFile(honest) as zin, zipfile.ZipFile(tmp_path / "obj.pt2", "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if info.filename.endswith("constants_config.json"):
                data = data.replace(b'"path_name": "tensor_', f'"path_name": "{prefix}'.encode())
            zout.writestr(info, data)
    with pytest.raises(ModelError, match=rf"data/constants/{prefix}0: constant 'c' is a pickled object"):
        check_export_archive(tmp_path / "obj.pt2")


def _rewrite_model_json(src, dst, change):
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if info.filename.endswith("models/model.json"):
                data = json.dumps(change(json.loads(data))).encode()
            zout.writestr(info, data)
    return dst


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        pytest.param(
            lambda doc: {**doc, "guards_code": ["__import__('os').getpid() or True"]},
            "guards_code holds Python code",
            id="guards",
        ),
        pytest.param(
            lambda doc: json.loads(json.dumps(doc).replace("torch.ops.aten.linear.default", "torch.load")),
            "calls torch.load, which is not an allowed operator",
            id="node-target",
        ),
    ],
)
def test_guards_and_node_targets_outside_the_allowlist_are_refused(tmp_path, change, reason):
    from clgate.engine.errors import ModelError
    from clgate.engine.modelfile import check_export_archive
    from clgate.engine.models import build_model
    from tests.fixtures.model_attacks import export_program

    honest = export_program(build_model("mlp", (8,), 6, hidden=16), tmp_path / "honest.pt2")
    with pytest.raises(ModelError, match=rf"models/model.json: .*{reason}"):
        check_export_archive(_rewrite_model_json(honest, tmp_path / "changed.pt2", change))
