"""`tessera demo --vdla`: compiles an int8 conv for VDLA, prints the disassembled stream and the
simulated cycles, and checks the result against NumPy (exit status 0 only when bit-identical)."""
from tessera.cli import main


def test_demo_vdla_prints_stream_and_cycles(capsys):
    assert main(["demo", "--vdla"]) == 0
    out = capsys.readouterr().out
    assert "2 virtual thread(s)" in out and "GEMM uop[" in out and "LOAD  wgt" in out
    assert "serial:" in out and "2 virtual threads:" in out and "GEMM utilization" in out
    assert "bit-identical to the NumPy int8 reference: OK" in out
