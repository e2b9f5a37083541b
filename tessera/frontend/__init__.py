"""Frontends: models in (ONNX, torch.export) -> (tessera.graph.Graph, params)."""


def from_onnx(model, shape_dict=None, **kwargs):
    from .onnx import from_onnx as _from_onnx

    return _from_onnx(model, shape_dict=shape_dict, **kwargs)
