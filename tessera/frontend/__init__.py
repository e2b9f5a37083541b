"""Frontends: models in (ONNX, torch.export) -> (tessera.graph.Graph, params)."""
from .onnx import from_onnx

__all__ = ["from_onnx"]
