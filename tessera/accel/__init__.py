"""Accelerators tessera compiles for. `vdla`: the decoupled access-execute deep learning
accelerator of the TVM paper (the open VTA design): ISA, simulator, intrinsics and lowering."""
