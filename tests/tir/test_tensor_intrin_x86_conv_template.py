"""The x86 conv micro-kernel's fixed C (tir/tensor_intrin/x86_conv.c): shipped as package data, every
section of it used by the generator. The kernels it renders are tested in tests/ops/nn/test_conv_nchwc*.py."""
import fnmatch
import os
import re
import tomllib

from tessera.codegen import c_files
from tessera.tir.tensor_intrin import x86_conv

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.dirname(os.path.abspath(x86_conv.__file__))


def test_template_is_package_data():
    """Every .c beside the intrinsics matches pyproject's package-data globs (else a wheel lacks it)."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        globs = tomllib.load(f)["tool"]["setuptools"]["package-data"]["tessera.tir.tensor_intrin"]
    files = [f for f in os.listdir(HERE) if f.endswith(".c")]
    assert "x86_conv.c" in files
    for name in files:
        assert any(fnmatch.fnmatch(name, g) for g in globs), name


def test_every_template_section_is_rendered():
    with open(x86_conv.__file__, encoding="utf-8") as f:
        used = set(re.findall(r'_c\("(\w+)"', f.read()))
    assert set(c_files.sections("x86_conv.c", directory=HERE)) == used
