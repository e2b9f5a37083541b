"""`tessera generate` (tessera.cli.main): a small zoo decoder exported to an ONNX file, its printed tokens
those of tessera.generate (greedy, a batch, int8 weights, seeded sampling), the tokens/s line, and
refusals as one error line."""
import re

import onnx
import pytest

import tessera
from tessera import zoo
from tessera.cli import main
from tessera.errors import TesseraError
from tessera.generation.command import parse_token_ids, sampling_options

SMALL = {"gpt2_decoder": dict(n_layers=2, hidden=64, heads=4, vocab=300, n_positions=64),
         "llama_decoder": dict(n_layers=2, hidden=64, heads=4, kv_heads=2, ffn=96, vocab=300, max_position=64)}
TARGET = "c -num-threads=2"


@pytest.fixture(scope="module", params=sorted(SMALL))
def model_path(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("generate") / f"{request.param}.onnx"
    onnx.save(zoo.get_model(request.param, batch="batch_size", **SMALL[request.param]), path)
    return str(path)


def _tokens(out: str) -> dict:
    """{row: [token ids]} of the printed `tokens: ...` / `tokens[r]: ...` lines."""
    rows = {}
    for m in re.finditer(r"^tokens(?:\[(\d+)\])?: ([\d,]+)$", out, re.M):
        rows[int(m.group(1) or 0)] = [int(t) for t in m.group(2).split(",")]
    return rows


def test_printed_tokens_are_generates(model_path, capsys):
    argv = ["generate", model_path, "--prompt-ids", "3,141,59,26", "--max-new-tokens", "12", "--threads", "2"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    want = tessera.generate(model_path, [3, 141, 59, 26], 12, target=TARGET)
    assert _tokens(out) == {0: want.tokens[0]}
    m = re.search(r"^decode: 11 steps in [\d.]+ ms, ([\d.]+) ms/token, ([\d.]+) tokens/s$", out, re.M)
    assert m and float(m.group(1)) > 0 and float(m.group(2)) > 0, out
    assert re.search(r"^prefill: 4 prompt tokens \(1 row\) in [\d.]+ ms", out, re.M), out
    assert "float32 weights" in out


def test_a_batch_int8_weights_and_seeded_sampling(model_path, capsys):
    prompts = [[11, 2], [5, 6, 290, 8, 9, 10]]
    argv = ["generate", model_path, "--prompt-ids", "11,2", "--prompt-ids", "5 6 290 8 9 10", "--max-new-tokens", "9",
            "--threads", "2", "--int8-weights", "--top-k", "20", "--top-p", "0.9", "--seed", "7"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    want = tessera.generate(model_path, prompts, 9, target=TARGET, weights="int8", do_sample=True, top_k=20,
                            top_p=0.9, seed=7)
    assert _tokens(out) == dict(enumerate(want.tokens))
    assert "int8 weights" in out and "sampled" in out


def test_stop_tokens_end_the_rows(model_path, capsys):
    first = tessera.generate(model_path, [3, 141, 59, 26], 12, target=TARGET).tokens[0]
    stop = first[2]
    assert main(["generate", model_path, "--prompt-ids", "3,141,59,26", "--max-new-tokens", "12", "--threads", "2",
                 "--stop-tokens", str(stop)]) == 0
    got = _tokens(capsys.readouterr().out)[0]
    assert got == first[:first.index(stop) + 1]


def test_a_builtin_decoder_by_name_and_one_new_token(capsys):
    # the zoo's LLaMA-style decoder at its own (small) default size; one new token: the prefill's, no step
    assert main(["generate", "llama_decoder", "--prompt-ids", "1,2,3", "--max-new-tokens", "1", "--threads", "2"]) == 0
    out = capsys.readouterr().out
    assert len(_tokens(out)[0]) == 1 and "no decoding step" in out


@pytest.mark.parametrize("argv, message", [
    (["--prompt-ids", "1,x,3"], "'x' in '1,x,3' is not a token id"),
    (["--prompt-ids", ","], "no token ids"),
    (["--prompt-ids", "1,2", "--max-new-tokens", "0"], "max_new_tokens must be an int >= 1"),
    (["--prompt-ids", "1,5000"], "outside the vocabulary"),
    (["--prompt-ids", "1,2", "--top-p", "1.5"], "top_p must be in (0, 1]"),
    (["--prompt-ids", "1,2", "--stop-tokens", "a"], "--stop-tokens: 'a'"),
])
def test_refusals_print_one_error_line(model_path, argv, message, capsys):
    assert main(["generate", model_path, "--threads", "2", *argv]) == 2
    lines = capsys.readouterr().err.strip().splitlines()     # (compile progress lines may come first)
    assert lines[-1].startswith("tessera: error: ") and message in lines[-1], lines
    assert sum(line.startswith("tessera: error") for line in lines) == 1, lines


def test_a_missing_model_file(tmp_path, capsys):
    assert main(["generate", str(tmp_path / "none.onnx"), "--prompt-ids", "1"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_parse_token_ids_and_sampling_options():
    assert parse_token_ids("1,2, 3") == [1, 2, 3] and parse_token_ids("7") == [7]
    with pytest.raises(TesseraError, match="token ids are >= 0"):
        parse_token_ids("1,-2")
    assert not sampling_options(seed=3)["do_sample"]
    assert sampling_options(top_k=5)["do_sample"] and sampling_options(sample=True)["do_sample"]
    assert sampling_options(temperature=0.7)["do_sample"]
