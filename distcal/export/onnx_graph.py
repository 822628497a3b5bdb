"""A calibration model as an ONNX graph (``model.to_onnx``), built with ``onnx.helper``.

Input ``score``: double [N] (binary) or [N, K] (multiclass); output
``probability``: double [N] or [N, K]; equal to ``model.predict`` to 1e-12
under onnxruntime (in practice to the last bit for blocks and bins).

Blocks and bins (:mod:`distcal.core.piecewise`): the leaf index
i(s) = #{t_j <= s} (or < s) is found by a branchless binary search in
ceil(log2(leaves)) rounds of ``Gather`` + ``LessOrEqual`` + ``Where`` on an
int64 position per score. The thresholds are padded with NaN to 2^r - 1
entries: every comparison with NaN is false, so the padding never counts.
This is exact in double (only comparisons of doubles, no arithmetic on the
scores) and costs O(N log m) work and memory, where a ``Less`` against all
m thresholds followed by ``ReduceSum`` would need an N x m matrix, too much
for 100,000 blocks. The leaf then gives ``y`` (constant leaves) or
``slope * (s - x) + y`` (linear ones): the operations of ``np.interp``.
Scores of -inf/+inf get the overrides of a block without finite knots and
NaN gives NaN (``IsInf``, ``IsNaN``, ``Where``).

Sigmoid: 1 / (1 + exp(a s + b)) (no error on overflow in ONNX: exp(z) = inf
gives 0). One-vs-rest: each class's map on column k, then p = q / sum(q)
with 1/K for a zero sum (K = 2: p1 from column 1, p0 = 1 - p1).
Temperature: softmax(beta * z), z the logits, or ln(s + 1e-12) when the
fit read probabilities, as ``predict`` does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.piecewise import Piecewise, is_keyed, piecewise

__all__ = ["to_onnx", "OPSET", "IR_VERSION"]

OPSET = 17
IR_VERSION = 8  # what opset 17 shipped with; read by onnxruntime >= 1.12
LOGIT_EPS = 1e-12


class _Graph:
    """Nodes and constants of one graph, with unique names."""

    def __init__(self) -> None:
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self._count = 0

    def name(self, hint: str) -> str:
        self._count += 1
        return f"{hint}_{self._count}"

    def const(self, value: Any, hint: str = "c", dtype: Any = np.float64) -> str:
        from onnx import numpy_helper

        name = self.name(hint)
        self.initializers.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def op(self, op_type: str, inputs: list[str], hint: str = "", **attrs: Any) -> str:
        from onnx import helper

        out = self.name(hint or op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out


def _search(g: _Graph, pw: Piecewise, s: str) -> str:
    """int64 [N]: the leaf index of each score (branchless binary search)."""
    from onnx import numpy_helper

    m = pw.thresholds.shape[0]
    rounds = m.bit_length()  # 2^rounds - 1 >= m: every count 0..m is reachable
    pos = g.op("ConstantOfShape", [g.op("Shape", [s])], "pos",
               value=numpy_helper.from_array(np.zeros(1, dtype=np.int64)))
    if rounds == 0:
        return pos
    padded = np.full((1 << rounds) - 1, np.nan)
    padded[:m] = pw.thresholds
    table = g.const(padded, "thresholds")
    compare = "LessOrEqual" if pw.right else "Less"
    for r in reversed(range(rounds)):
        step = 1 << r
        # The count can grow by `step` iff threshold number pos + step (1-based) counts.
        t = g.op("Gather", [table, g.op("Add", [pos, g.const(step - 1, "i", np.int64)])])
        grown = g.op("Add", [pos, g.const(step, "i", np.int64)])
        pos = g.op("Where", [g.op(compare, [t, s]), grown, pos], "pos")
    return pos


def _binary(g: _Graph, model: Any, s: str) -> str:
    """double [N]: one binary map applied to the scores ``s`` (double [N])."""
    if model.method == "beta":
        return _beta(g, model, s)
    pw = piecewise(model)
    if pw is None:  # sigmoid
        one, a = g.const(1.0, "one"), float(model.params["a"])
        # a = 0: the constant map, at s = +-inf too (0 * inf is NaN)
        a_s = g.op("Mul", [s, g.const(a, "a")]) if a != 0.0 else \
            g.op("Where", [g.op("IsNaN", [s]), s, g.const(0.0, "zero")])
        z = g.op("Add", [a_s, g.const(float(model.params["b"]), "b")])
        return g.op("Div", [one, g.op("Add", [one, g.op("Exp", [z])])], "sigmoid")
    pos = _search(g, pw, s)
    y = g.op("Gather", [g.const(pw.y0, "y"), pos])
    out = y
    if not pw.constant.all():
        slope = g.op("Gather", [g.const(pw.slope, "slope"), pos])
        x0 = g.op("Gather", [g.const(pw.x0, "x"), pos])
        lin = g.op("Add", [g.op("Mul", [slope, g.op("Sub", [s, x0])]), y])
        # Constant leaves never compute 0 * (s - x): s may be infinite there.
        out = g.op("Where", [g.op("Gather", [g.const(pw.constant, "constant", bool), pos]), y,
                             lin])
    if pw.at_neg_inf is not None:
        out = g.op("Where", [g.op("IsInf", [s], detect_positive=0),
                             g.const(pw.at_neg_inf, "at_neg_inf"), out])
    if pw.at_pos_inf is not None:
        out = g.op("Where", [g.op("IsInf", [s], detect_negative=0),
                             g.const(pw.at_pos_inf, "at_pos_inf"), out])
    return g.op("Where", [g.op("IsNaN", [s]), g.const(np.nan, "nan"), out], "map")


def _beta(g: _Graph, model: Any, s: str) -> str:
    """Beta calibration: expit(a ln x - b ln(1 - x) + c), x = s clipped (NaN: NaN)."""
    from ..core.beta import CLIP

    one = g.const(1.0, "one")
    x = g.op("Max", [g.op("Min", [s, g.const(1.0 - CLIP, "hi")]), g.const(CLIP, "lo")])
    z = g.op("Add", [g.op("Sub", [g.op("Mul", [g.const(float(model.params["a"]), "a"),
                                               g.op("Log", [x])]),
                                  g.op("Mul", [g.const(float(model.params["b"]), "b"),
                                               g.op("Log", [g.op("Sub", [one, x])])])]),
                     g.const(float(model.params["c"]), "c")])
    p = g.op("Div", [one, g.op("Add", [one, g.op("Exp", [g.op("Neg", [z])])])], "beta")
    return g.op("Where", [g.op("IsNaN", [s]), g.const(np.nan, "nan"), p], "map")


def _column(g: _Graph, scores: str, k: int) -> str:
    return g.op("Gather", [scores, g.const(k, "k", np.int64)], "column", axis=1)


def _stack(g: _Graph, columns: list[str]) -> str:
    axis = g.const([1], "axis", np.int64)
    return g.op("Concat", [g.op("Unsqueeze", [c, axis]) for c in columns], "stack", axis=1)


def _ovr(g: _Graph, model: Any, scores: str) -> str:
    k = model.n_classes
    if k == 2:
        p1 = _binary(g, model.class_model(1), _column(g, scores, 1))
        return _stack(g, [g.op("Sub", [g.const(1.0, "one"), p1]), p1])
    q = _stack(g, [_binary(g, model.class_model(c), _column(g, scores, c)) for c in range(k)])
    total = g.op("ReduceSum", [q, g.const([1], "axis", np.int64)], "total", keepdims=1)
    zero = g.op("Equal", [total, g.const(0.0, "zero")])
    return g.op("Where", [zero, g.const(1.0 / k, "uniform"), g.op("Div", [q, total])])


def _temperature(g: _Graph, model: Any, scores: str) -> str:
    logits = scores
    if model.params["input_"] == "probabilities":
        logits = g.op("Log", [g.op("Add", [scores, g.const(LOGIT_EPS, "eps")])], "logits")
    a = g.op("Mul", [logits, g.const(float(model.beta), "beta")])
    axis = g.const([1], "axis", np.int64)
    top = g.op("ReduceMax", [a], axes=[1], keepdims=1)
    e = g.op("Exp", [g.op("Sub", [a, top])])
    total = g.op("ReduceSum", [e, axis], keepdims=1)
    softmax = g.op("Div", [e, total])
    # +inf logits (inf - inf is NaN): their classes share 1 equally, as predict's limit;
    # a row holding NaN stays NaN.
    inf = g.const(float("inf"), "inf")
    hit = g.op("Cast", [g.op("Equal", [a, inf])], to=11)
    nan = g.op("ReduceMax", [g.op("Cast", [g.op("IsNaN", [a])], to=11)], axes=[1], keepdims=1)
    limit = g.op("And", [g.op("Equal", [g.op("ReduceMax", [hit], axes=[1], keepdims=1),
                                        g.const(1.0, "one")]),
                         g.op("Equal", [nan, g.const(0.0, "zero")])])
    shared = g.op("Div", [hit, g.op("ReduceSum", [hit, axis], keepdims=1)])
    return g.op("Where", [limit, shared, softmax], "softmax")


def to_onnx(model: Any) -> Any:
    """The ``onnx.ModelProto`` of ``model`` (see the module docstring).

    A model fitted with ``by=`` has one map per segment and no segment
    input: export ``model.segment(key)`` or ``model.global_model``.
    """
    from onnx import TensorProto, checker, helper

    keyed = is_keyed(model)
    if keyed and model.by:
        raise ValueError("an ONNX graph takes scores only, no segment keys: export "
                         "model.segment(key).to_onnx() or model.global_model.to_onnx(), or "
                         "use model.to_sql(), which selects the segment's map by key")
    k = model.n_classes if keyed else 0
    g = _Graph()
    shape: list[Any] = ["N"] if k < 2 else ["N", k]
    if k < 2:
        out = _binary(g, model, "score")
    elif model.method == "temperature":
        out = _temperature(g, model, "score")
    else:
        out = _ovr(g, model, "score")
    g.nodes.append(helper.make_node("Identity", [out], ["probability"], name="probability"))
    graph = helper.make_graph(
        g.nodes, "distcal_calibration",
        [helper.make_tensor_value_info("score", TensorProto.DOUBLE, shape)],
        [helper.make_tensor_value_info("probability", TensorProto.DOUBLE, shape)],
        initializer=g.initializers)
    proto = helper.make_model(graph, producer_name="distcal",
                              opset_imports=[helper.make_opsetid("", OPSET)])
    proto.ir_version = IR_VERSION
    proto.doc_string = f"distcal {model.method} calibration: p = predict(score)"
    checker.check_model(proto)
    return proto
