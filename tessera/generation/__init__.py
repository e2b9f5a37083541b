"""Generation with decoder language models: `Generator` (a decoder compiled for generation: the prompt
through tessera.compile, then one token at a time over a KV cache by a compiled decoding step) and
`generate`. See generator.py."""
from .generator import GenerationOutput, Generator, generate
from .sampling import Sampler
from .weights import DecoderConfig, load_config, read_weights

__all__ = ["Generator", "GenerationOutput", "generate", "Sampler", "DecoderConfig", "load_config", "read_weights"]
