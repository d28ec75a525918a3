"""Fuzz the batch-norm fold: 169 mutations of a Conv + BatchNormalization + Relu model
(each parameter's shape, dtype and values, attributes, inputs, outputs, domains, opsets)
through ``api.layers`` with each ``--batch-norm`` layering, counting tracebacks (anything
but an AutotuneError). Run: ``python benchmarks/fuzz_batch_norm_fold.py [LAYERING...]``
(about 25 s here); 2026-12-08: 45 tracebacks before the checker ran first and the fold
kept to fitting float parameters, 0 after.
"""
import collections
import copy
import os
import sys
import tempfile
import traceback
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from autotune import api
from autotune.errors import AutotuneError

rng = np.random.default_rng(0)
def init(name, shape, dtype="float32", low=None):
    data = rng.uniform(low, 2.0, shape) if low is not None else rng.standard_normal(shape)
    return numpy_helper.from_array(data.astype(dtype), name)

def base(opset=17):
    inits = [init("w", [6, 4, 3, 3]), init("bias", [6]), init("g", [6]), init("b", [6]), init("m", [6]), init("v", [6], low=0.1)]
    nodes = [helper.make_node("Conv", ["x", "w", "bias"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "g", "b", "m", "v"], ["n"], epsilon=1e-3),
             helper.make_node("Relu", ["n"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 8, 8])
    return helper.make_model(helper.make_graph(nodes, "g", [x], [y], initializer=inits), opset_imports=[helper.make_opsetid("", opset)])

def set_init(m, name, tensor):
    for i, t in enumerate(m.graph.initializer):
        if t.name == name:
            m.graph.initializer[i].CopyFrom(tensor); return
    m.graph.initializer.append(tensor)

mutations = []
for p in ["w", "bias", "g", "b", "m", "v"]:
    for shape in ([], [5], [7], [6, 1], [1, 6], [0], [6, 4, 3], [6, 4, 3, 3, 1], [3, 4, 3, 3], [6, 2, 3, 3]):
        mutations.append((f"{p} shape {shape}", lambda m, p=p, s=shape: set_init(m, p, init(p, s))))
    for dt in ("float16", "float64", "int32", "int64", "uint8", "bool"):
        mutations.append((f"{p} dtype {dt}", lambda m, p=p, dt=dt: set_init(m, p, numpy_helper.from_array(np.ones([6, 4, 3, 3] if p == "w" else [6]).astype(dt), p))))
    for val in (np.nan, np.inf, -1.0, 0.0, 1e38):
        mutations.append((f"{p} value {val}", lambda m, p=p, v=val: set_init(m, p, numpy_helper.from_array(np.full([6, 4, 3, 3] if p == "w" else [6], v, "float32"), p))))
    mutations.append((f"{p} not an initializer", lambda m, p=p: [m.graph.initializer.remove(t) for t in list(m.graph.initializer) if t.name == p]))
def attr(m, node, name, value):
    n = m.graph.node[node]
    for a in list(n.attribute):
        if a.name == name: n.attribute.remove(a)
    n.attribute.append(helper.make_attribute(name, value))
for val in (-1.0, 0.0, float("nan"), float("inf"), 1e30, "x", 3, [1.0]):
    mutations.append((f"epsilon {val!r}", lambda m, v=val: attr(m, 1, "epsilon", v)))
for val in (1, 2, -1, "x"):
    mutations.append((f"training_mode {val!r}", lambda m, v=val: attr(m, 1, "training_mode", v)))
for val in (0, 2, 3, -1, 6):
    mutations.append((f"group {val}", lambda m, v=val: attr(m, 0, "group", v)))
mutations.append(("bn fewer inputs", lambda m: m.graph.node[1].input.pop()))
mutations.append(("bn 3 inputs", lambda m: [m.graph.node[1].input.pop() for _ in range(2)]))
mutations.append(("bn extra input", lambda m: m.graph.node[1].input.append("v")))
mutations.append(("bn two outputs", lambda m: m.graph.node[1].output.append("extra")))
mutations.append(("bn empty input name", lambda m: m.graph.node[1].input.__setitem__(3, "")))
mutations.append(("conv no weight", lambda m: [m.graph.node[0].input.pop() for _ in range(2)]))
mutations.append(("conv weight empty name", lambda m: m.graph.node[0].input.__setitem__(1, "")))
mutations.append(("conv extra input", lambda m: m.graph.node[0].input.append("bias")))
mutations.append(("conv two outputs", lambda m: m.graph.node[0].output.append("c2")))
mutations.append(("conv domain", lambda m: setattr(m.graph.node[0], "domain", "com.x")))
mutations.append(("bn domain", lambda m: setattr(m.graph.node[1], "domain", "com.x")))
mutations.append(("bn reads itself", lambda m: m.graph.node[1].input.__setitem__(0, "n")))
mutations.append(("conv reads bn output", lambda m: m.graph.node[0].input.__setitem__(0, "n")))
mutations.append(("bn before conv", lambda m: m.graph.node.insert(0, copy.deepcopy(m.graph.node.pop(1)))))
mutations.append(("duplicate conv output", lambda m: m.graph.node.insert(1, copy.deepcopy(m.graph.node[0]))))
mutations.append(("opset 7", lambda m: m.opset_import[0].__setattr__("version", 7)))
mutations.append(("opset 9", lambda m: m.opset_import[0].__setattr__("version", 9)))
mutations.append(("opset 99", lambda m: m.opset_import[0].__setattr__("version", 99)))
mutations.append(("bias scalar init", lambda m: set_init(m, "bias", numpy_helper.from_array(np.array(1.0, "float32"), "bias"))))
mutations.append(("raw_data short", lambda m: m.graph.initializer[2].__setattr__("raw_data", b"\x00" * 7)))

tracebacks = collections.Counter(); ok = refused = 0; okc = collections.Counter()
only = sys.argv[1:]
path = os.path.join(tempfile.mkdtemp(prefix="fuzz-bn-"), "m.onnx")
for label, mutate in mutations:
    m = base(); mutate(m)
    onnx.save(m, path)
    for layering in ("weights", "epilogue", "separate"):
        if only and layering not in only: continue
        try:
            api.layers(path, batch_norm=layering); ok += 1; okc[label] += 1
        except AutotuneError: refused += 1
        except Exception as e:
            tb = traceback.extract_tb(e.__traceback__)[-1]
            tracebacks[(type(e).__name__, tb.filename.split("/")[-1], tb.lineno)] += 1
            print(f"TRACEBACK {label} [{layering}]: {type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}")
oks = [l for l, c in okc.items() if c == 3]; print("OK in all:", oks)
print(f"cases {len(mutations)}: ok {ok}, refused {refused}, tracebacks {sum(tracebacks.values())}")
for k, v in tracebacks.most_common(): print(v, k)
