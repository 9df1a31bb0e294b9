"""Hostile and damaged GGUF files never reach llama.cpp: the validator stops them
with a clear error, because llama.cpp itself would abort the whole process.

The fuzz run is bounded for CI; EDGESPEC_FUZZ_EXAMPLES=5000 runs a longer one. Mutations
hit a tiny model written here (fast to load thousands of times) and the real SmolLM2 file.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tiny_gguf
from edgespec.errors import ModelError
from edgespec.gguf_check import check_gguf, read_gguf

FUZZ_EXAMPLES = int(os.environ.get("EDGESPEC_FUZZ_EXAMPLES", "60"))
LOAD = ("import sys; from llama_cpp import Llama; m = Llama(sys.argv[1], n_ctx=64, verbose=False); "
        "m.eval(m.tokenize(b'the cat'))")


def load_in_llama_cpp(path) -> int:
    """llama.cpp's own loader in a child process: its exit code (negative: killed by a signal)."""
    return subprocess.run([sys.executable, "-c", LOAD, str(path)], capture_output=True, timeout=120).returncode


def edgespec_generate(path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "edgespec", "generate", "hi", "-m", str(path), "-d", "none", "-n", "4"],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_gguf.write(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


def test_the_tiny_model_is_valid_and_loads(tiny):
    assert check_gguf(tiny).n_vocab == 259
    assert load_in_llama_cpp(tiny) == 0


# Found by the fuzz run below: one changed byte in a token's text makes two tokens equal,
# and llama.cpp 0.3.36 aborts (GGML_ASSERT id_to_token.size() == token_to_id.size()).
# Found by hand: a layer count over LLAMA_MAX_LAYERS aborts it as well (llama-model.cpp).
HOSTILE = {
    "duplicate tokens": dict(tokens=[*tiny_gguf.byte_tokens(), "he", "he", "<|endoftext|>"]),
    "block_count over llama.cpp's limit": dict(block_count=1000),
}


@pytest.mark.parametrize("name", HOSTILE)
def test_files_that_abort_llama_cpp_are_refused_before_loading(name, tmp_path):
    path = tiny_gguf.write(tmp_path / "hostile.gguf", **HOSTILE[name])
    assert load_in_llama_cpp(path) < 0, "llama.cpp no longer dies on this file: the case documents a fixed bug"
    with pytest.raises(ModelError, match="corrupt GGUF"):
        check_gguf(path)
    r = edgespec_generate(path)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.strip().startswith("error:") and len(r.stderr.strip().splitlines()) == 1


def test_a_layer_count_without_its_layers_is_refused(tmp_path):
    path = tiny_gguf.write(tmp_path / "short.gguf", block_count=5)  # 2 layers of tensors
    with pytest.raises(ModelError, match="no tensors for layer 4"):
        check_gguf(path)


@pytest.fixture(scope="module")
def header(tiny):
    data = tiny.read_bytes()
    return data, min(int(t.data_offset) for t in read_gguf(tiny).tensors)


@settings(max_examples=FUZZ_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_mutated_headers_are_refused_or_load_without_crashing(header, tmp_path, data):
    raw, header_end = header
    b = bytearray(raw)
    # metadata and tensor descriptions: where a parser goes wrong (tensor bytes are just numbers)
    for pos, value in data.draw(st.lists(st.tuples(st.integers(4, header_end - 1), st.integers(0, 255)),
                                         min_size=1, max_size=4)):
        b[pos] = value
    path = tmp_path / "mutated.gguf"
    path.write_bytes(b)
    try:
        check_gguf(path)
    except ModelError:
        return  # refused with a clear message: fine
    assert load_in_llama_cpp(path) >= 0  # accepted: llama.cpp may refuse it, but must not die


@settings(max_examples=FUZZ_EXAMPLES * 5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=4096))
def test_random_bytes_after_the_magic_are_refused(tmp_path, junk):
    path = tmp_path / "junk.gguf"
    path.write_bytes(b"GGUF" + junk)
    with pytest.raises(ModelError):
        check_gguf(path)


@pytest.fixture(scope="module")
def real_header(smollm2_path):
    return smollm2_path, min(int(t.data_offset) for t in read_gguf(smollm2_path).tensors)


@pytest.mark.real_model
@settings(max_examples=max(FUZZ_EXAMPLES // 6, 10), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_mutated_headers_of_a_real_model_are_refused_or_load_without_crashing(real_header, tmp_path, data):
    """The same on the real SmolLM2 file: its 3 MB of metadata (49k tokens, merges,
    chat template) mutated, its weights intact."""
    import shutil

    real, header_end = real_header
    path = tmp_path / "mutated-real.gguf"
    shutil.copyfile(real, path)
    with open(path, "r+b") as f:
        for pos, value in data.draw(st.lists(st.tuples(st.integers(4, header_end - 1), st.integers(0, 255)),
                                             min_size=1, max_size=4)):
            f.seek(pos)
            f.write(bytes([value]))
    try:
        check_gguf(path)
    except ModelError:
        return
    assert load_in_llama_cpp(path) >= 0
