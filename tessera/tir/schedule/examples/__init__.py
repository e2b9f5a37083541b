"""Hand-written schedules that show the primitives working together (and that benchmarks measure):
gemm.py, the GotoBLAS-style fp32/int8 GEMM around a tensorized micro-kernel; conv2d.py, a direct
convolution in NHWC around the same micro-kernel."""
