"""The report tests' shared fixture: a small BERT (one layer, 16 tokens) compiled once per session."""
import pytest

import tessera
from tessera import zoo

from report_helpers import SMALL_BERT, TARGET


@pytest.fixture(scope="session")
def small_bert():
    pytest.importorskip("onnx")
    g, params = tessera.frontend.from_onnx(zoo.get_model("bert_base", **SMALL_BERT))
    return tessera.compile(g, params, target=TARGET)

