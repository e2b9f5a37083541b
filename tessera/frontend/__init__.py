"""Frontends: models in (ONNX, torch.export) -> (tessera.graph.Graph, params)."""
from .onnx import from_onnx
from .torch import from_exported_program

__all__ = ["from_onnx", "from_exported_program"]
