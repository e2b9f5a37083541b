"""executor/hetero.py: the quantized convolutions of an int8 graph run on VDLA (the simulator),
the rest on the CPU, with the copies between them explicit steps; the result is bit-identical to the
CPU-only int8 run."""
import numpy as np
import pytest

import tessera
from tessera.executor import partition_for_vdla
from tessera.graph.passes.quantize import quantize

from vdla_models import inputs, small_cnn


@pytest.fixture(scope="module")
def qgraph():
    return quantize(small_cnn(), calibration=inputs(3, seed=7))


def test_partitioned_run_is_bit_identical_to_cpu_int8(qgraph):
    plan = partition_for_vdla(qgraph)
    kinds = [s.kind for s in plan.steps]
    assert kinds.count("vdla") == 4            # every conv: 16 -> 32, two 32 -> 32, 1x1 32 -> 64
    assert "to_vdla" in kinds and "from_vdla" in kinds and "cpu" in kinds
    # data moves only where a CPU step needs a VDLA result, or VDLA a CPU result
    for i, s in enumerate(plan.steps):
        if s.kind == "vdla":
            assert all(x.endswith("@vdla") for x in s.inputs + s.outputs)
    text = str(plan)
    assert "NCHW -> NCHW1n16c" in text and "conv2d 16x8x8->32 k3 s1 p1" in text
    cpu = tessera.compile(qgraph)
    for feed in inputs(3, seed=11):
        np.testing.assert_array_equal(plan.run(feed)[0], cpu.run(feed)[0])
    reps = plan.vdla_report()
    assert len(reps) == 4 and all(r.cycles > 0 and r.gemm_uops > 0 for r in reps.values())


def test_serial_chain_of_vdla_convs_passes_packed_data(qgraph):
    plan = partition_for_vdla(qgraph, vthreads=1)
    steps = plan.steps
    # the two convs of the residual branch follow each other on VDLA without a copy between them
    pairs = [(a, b) for a, b in zip(steps, steps[1:]) if a.kind == b.kind == "vdla"]
    assert pairs and all(a.outputs[0] == b.inputs[0] for a, b in pairs)


@pytest.mark.slow
def test_resnet18_cpu_plus_vdla(capsys):
    """The zoo's ResNet-18 (224x224), quantized by the pass: CPU+VDLA bit-identical to CPU-only int8;
    top-1 agreement with fp32 over 100 seeded inputs, and the simulated cycles, printed."""
    import time

    from tessera.frontend.onnx import from_onnx

    g, params = from_onnx(tessera.zoo.get_model("resnet18"))
    rng = np.random.default_rng(0)
    feeds = [{"input": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)} for _ in range(104)]
    qg = quantize(g, params, calibration=feeds[:4])
    plan = partition_for_vdla(qg)
    cpu, fp32 = tessera.compile(qg), tessera.compile(g, params)
    t0 = time.perf_counter()
    y = plan.run(feeds[4])[0]
    secs = time.perf_counter() - t0
    np.testing.assert_array_equal(y, cpu.run(feeds[4])[0])
    agree = sum(int(cpu.run(f)[0].argmax() == fp32.run(f)[0].argmax()) for f in feeds[4:])
    cycles = sum(r.cycles for r in plan.vdla_report().values())
    with capsys.disabled():
        print(f"\nresnet18 int8 CPU+VDLA: {sum(s.kind == 'vdla' for s in plan.steps)} convs on VDLA, "
              f"{cycles} simulated cycles; one run (simulation + CPU parts) {secs:.1f} s; "
              f"top-1 agreement with fp32 {agree}/100")
    assert agree >= 50


@pytest.mark.slow
def test_conv_vdla_cannot_run_stays_on_cpu():
    """A 3-channel first conv (not a multiple of VDLA's 16-wide block) stays in a CPU segment."""
    qg = quantize(small_cnn(cin=3), calibration=inputs(2, seed=7, cin=3))
    plan = partition_for_vdla(qg)
    assert [s.kind for s in plan.steps].count("vdla") == 3
    first_cpu = next(s for s in plan.steps if s.kind == "cpu")
    assert first_cpu is plan.steps[0] and first_cpu.inputs == ["input"]
    feed = inputs(1, seed=5, cin=3)[0]
    np.testing.assert_array_equal(plan.run(feed)[0], tessera.compile(qg).run(feed)[0])
