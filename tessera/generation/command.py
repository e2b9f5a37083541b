"""What `tessera generate` does beyond parsing its arguments (tessera/cli.py): the prompts' token ids
from their text, the Generator built and run, and the lines it prints.

    tessera generate model.onnx --prompt-ids 464,3290,318 --max-new-tokens 64 [--int8-weights]
        [--top-k 50] [--top-p 0.9] [--temperature 0.8] [--seed 0] [--stop-tokens 50256] [--threads 2]

prints the model and how it was compiled, then `tokens: ...` (the new token ids of the prompt; with
several --prompt-ids, a batch, `tokens[r]: ...` per row) and the prefill's and the decoding's times,
ms/token and tokens/s.
"""
from __future__ import annotations

import time

from ..errors import TesseraError
from .generator import Generator
from .sampling import Sampler


def parse_token_ids(text: str, what: str = "--prompt-ids") -> list:
    """'1,2,3' (commas and/or spaces) -> [1, 2, 3]."""
    parts = [p for p in str(text).replace(",", " ").split()]
    if not parts:
        raise TesseraError(f"{what}: no token ids in {text!r} (expected comma-separated ints, e.g. 464,3290,318)")
    out = []
    for p in parts:
        try:
            v = int(p)
        except ValueError:
            raise TesseraError(f"{what}: {p!r} in {text!r} is not a token id (an int)") from None
        if v < 0:
            raise TesseraError(f"{what}: token ids are >= 0, got {v}")
        out.append(v)
    return out


def sampling_options(temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0, seed=None,
                     sample: bool = False) -> dict:
    """generate()'s sampling keywords: sampled when asked (`sample`) or when any of temperature, top-k,
    top-p is set away from its default (the command line's reading: --top-k 50 means sample), greedy
    otherwise (a seed alone changes nothing)."""
    do_sample = bool(sample) or temperature != 1.0 or top_k != 0 or top_p != 1.0
    return dict(do_sample=do_sample, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)


def run_generate(model, prompt_ids: list, max_new_tokens: int, *, target=None, int8_weights: bool = False,
                 config=None, stop_tokens: str | None = None, label: str | None = None, echo=print,
                 **sampling) -> int:
    """The command: build the Generator, generate, print (through `echo`); returns the exit status.
    prompt_ids: the --prompt-ids texts (one per batch row); sampling: sampling_options' keywords."""
    if not prompt_ids:
        raise TesseraError("generate: give the prompt's token ids with --prompt-ids 1,2,3")
    prompts = [parse_token_ids(t) for t in prompt_ids]
    stops = parse_token_ids(stop_tokens, "--stop-tokens") if stop_tokens else []
    options = sampling_options(**sampling)
    # the arguments checked before the model is compiled (generate checks them again)
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise TesseraError(f"generate: max_new_tokens must be an int >= 1, got {max_new_tokens!r}")
    Sampler(**options)
    weights = "int8" if int8_weights else "float32"
    t0 = time.perf_counter()
    gen = Generator(model, target=target, weights=weights, config=config)
    built = time.perf_counter() - t0
    c = gen.config
    how = (f"sampled (temperature {options['temperature']:g}, top-k {options['top_k']}, top-p {options['top_p']:g}, "
           f"seed {options['seed']})" if options["do_sample"] else "greedy")
    echo(f"{label or 'model'}: {c.arch}, {c.n_layers} layers, hidden {c.hidden}, vocab {c.vocab}; {weights} weights "
         f"({gen.engine.weight_bytes / 1e6:.1f} MB a step), target {gen.target}; compiled in {built:.1f} s; {how}")
    out = gen.generate(prompts, max_new_tokens, stop_tokens=stops, **options)
    for r, toks in enumerate(out.tokens):
        name = "tokens" if len(out.tokens) == 1 else f"tokens[{r}]"
        echo(f"{name}: {','.join(str(t) for t in toks)}")
    rows = len(prompts)
    prompt_tokens = sum(out.prompt_lengths)
    echo(f"prefill: {prompt_tokens} prompt tokens ({rows} row{'s' if rows > 1 else ''}) in "
         f"{out.prefill_seconds * 1e3:.1f} ms, {prompt_tokens / out.prefill_seconds:.1f} tokens/s")
    if out.decode_steps:
        echo(f"decode: {out.decode_steps} steps in {out.decode_seconds * 1e3:.1f} ms, {out.ms_per_token:.2f} ms/token, "
             f"{out.tokens_per_second:.1f} tokens/s")
    else:
        echo("decode: no decoding step (the first new token comes from the prefill"
             + (", and every row stopped)" if max_new_tokens > 1 else "; --max-new-tokens 1)"))
    return 0
