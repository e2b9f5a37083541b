"""Reference results for op tests: one ONNX node run by onnxruntime (or by onnx's reference
evaluator where onnxruntime lacks the op or the opset)."""
from __future__ import annotations

import numpy as np
from onnx import helper


def node_model(op_type, inputs, attrs=None, num_outputs=1, opset=19, input_names=None):
    """A one-node ONNX model; inputs are numpy arrays (None: an omitted optional input)."""
    names = input_names or [f"in{k}" if a is not None else "" for k, a in enumerate(inputs)]
    outs = [f"out{k}" for k in range(num_outputs)]
    node = helper.make_node(op_type, names, outs, **(attrs or {}))
    graph_inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                    for n, a in zip(names, inputs) if a is not None]
    graph = helper.make_graph([node], "g", graph_inputs, [helper.make_empty_tensor_value_info(o) for o in outs])
    # the IR version that matches the opset (not the newest): older onnxruntime builds refuse newer ones
    model = helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", opset)])
    feeds = {n: a for n, a in zip(names, inputs) if a is not None}
    return model, feeds


def ort_run(op_type, inputs, attrs=None, num_outputs=1, opset=19):
    """Outputs of onnxruntime for one node."""
    import onnxruntime as ort

    model, feeds = node_model(op_type, inputs, attrs, num_outputs, opset)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def reference_run(op_type, inputs, attrs=None, num_outputs=1, opset=19):
    """Outputs of onnx's reference evaluator for one node."""
    from onnx.reference import ReferenceEvaluator

    model, feeds = node_model(op_type, inputs, attrs, num_outputs, opset)
    return [np.asarray(o) for o in ReferenceEvaluator(model).run(None, feeds)]
