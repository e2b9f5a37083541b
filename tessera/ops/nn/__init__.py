"""The nn operator families (Relay names): convolution, dense/matmul, pooling, normalization,
softmax, attention. Each module registers its ops on import (tessera.ops imports them all)."""
