"""Hostile and damaged GGUF files never reach llama.cpp: the validator stops them
with a clear error, because llama.cpp itself would abort the whole process.

The fuzz run is bounded for CI; EDGESPEC_FUZZ_EXAMPLES=5000 runs a longer one. Mutations
hit a tiny model written here (fast to load thousands of times) and the real SmolLM2 file.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tiny_gguf
from crafted_gguf import CRAFTED, STRING, UINT8, array, header_only
from edgespec.errors import ModelError
from edgespec.models.gguf_check import check_gguf, read_gguf
from edgespec.models.gguf_probe import child_env
from edgespec.models.store import check_model_file
from helpers import assert_one_line_error, edgespec

FUZZ_EXAMPLES = int(os.environ.get("EDGESPEC_FUZZ_EXAMPLES", "60"))
LOAD = ("import sys; from llama_cpp import Llama; m = Llama(sys.argv[1], n_ctx=64, verbose=False); "
        "m.eval(m.tokenize(b'the cat'))")


def load_in_llama_cpp(path) -> int:
    """llama.cpp's own loader in a child process: its exit code (negative: killed by a signal)."""
    return subprocess.run([sys.executable, "-c", LOAD, str(path)], capture_output=True, timeout=120,
                          env=child_env()).returncode


def edgespec_generate(path) -> subprocess.CompletedProcess:
    return edgespec("generate", "hi", "-m", str(path), "-d", "none", "-n", "4", timeout=120)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_gguf.write(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


def test_the_tiny_model_is_valid_and_loads(tiny):
    assert check_gguf(tiny).n_vocab == 259
    assert load_in_llama_cpp(tiny) == 0


SEMANTIC = [name for name in CRAFTED if not name.startswith("2")]


@pytest.mark.parametrize("name", CRAFTED)
def test_each_crafted_file_is_refused_with_its_one_line(name, tmp_path):
    build, line = CRAFTED[name]
    path = build(tmp_path / "crafted.gguf")
    with pytest.raises(ModelError, match="corrupt GGUF") as refused:
        check_gguf(path)
    assert line in str(refused.value)
    assert_one_line_error(edgespec_generate(path), line)


@pytest.mark.parametrize("name", [n for n in SEMANTIC if n != "an end-of-text id outside the vocabulary"])
def test_llama_cpp_itself_dies_on_each_semantic_one(name, tmp_path):
    """Why the rules exist: loaded unchecked, each of these kills the process."""
    path = CRAFTED[name][0](tmp_path / "crafted.gguf")
    assert load_in_llama_cpp(path) < 0, "llama.cpp no longer dies on this file: the rule documents a fixed bug"


def test_what_the_rules_miss_the_child_load_refuses(tmp_path, monkeypatch):
    import edgespec.models.gguf_semantics

    monkeypatch.setattr(edgespec.models.gguf_semantics, "check_model", lambda reader: "llama")  # no rules at all
    path = CRAFTED["an unknown rope scaling type"][0](tmp_path / "crafted.gguf")
    with pytest.raises(ModelError, match=r"llama.cpp crashes on .*SIGABRT.*rope_scaling_type"):
        check_model_file(path)


def test_a_child_without_llama_cpp_says_nothing_of_the_file_and_nothing_is_kept(tmp_path, monkeypatch):
    import edgespec.models.gguf_probe as gguf_probe

    broken = tmp_path / "site" / "llama_cpp"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('no llama.cpp here')")
    env = gguf_probe.child_env
    monkeypatch.setattr(gguf_probe, "child_env", lambda: {**env(), "PYTHONPATH": str(broken.parent)})
    # a header no other test wrote: its verdict is not kept from before
    path = tiny_gguf.write(tmp_path / "model.gguf", metadata={"tiny.nonce": str(tmp_path)})
    with pytest.raises(ModelError, match="cannot check .*llama-cpp-python does not load .*no llama.cpp here"):
        check_model_file(path)
    monkeypatch.setattr(gguf_probe, "child_env", env)
    check_model_file(path)  # checked again where llama.cpp loads: the file is fine


def test_a_file_edited_in_place_is_checked_again_whatever_its_size_and_mtime(tmp_path):
    path = tiny_gguf.write(tmp_path / "model.gguf", metadata={"llama.rope.scaling.type": "none"})
    check_model_file(path)
    st = path.stat()
    edited = tiny_gguf.write(tmp_path / "edited.gguf", metadata={"llama.rope.scaling.type": "bogu"})
    path.write_bytes(edited.read_bytes())  # same length, one word changed
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns
    with pytest.raises(ModelError, match="'bogu'"):
        check_model_file(path)


def test_the_api_and_the_server_refuse_a_crafted_file_in_one_line(tmp_path):
    from edgespec import EdgeSpec

    build, line = CRAFTED["2000 experts"]
    path = build(tmp_path / "crafted.gguf")
    with pytest.raises(ModelError, match=line):
        EdgeSpec(str(path))
    assert_one_line_error(edgespec("serve", str(path), "--allow-path", "--port", "0", timeout=60), line)
    assert_one_line_error(edgespec("chat", "-m", str(path), stdin="hi\n", timeout=60), line)


def test_a_metadata_array_of_20_million_values_is_read_as_one_view(tmp_path):
    """The old reader made 20M Python objects of it (over a minute, 1.9 GB); now it is one view."""
    tokens = b"".join(struct.pack("<Q", 1) + bytes([b]) for b in range(256))
    kvs = array("tokenizer.ggml.tokens", STRING, 256, tokens) + array("padding", UINT8, 20_000_000, bytes(20_000_000))
    path = header_only(2, kvs)(tmp_path / "big.gguf")
    with pytest.raises(ModelError, match="holds no tensors"):  # read to the end of its metadata
        check_gguf(path)


# Values llama.cpp treats as limits, off-by-ones around them, and nonsense of every type.
COUNTS = st.one_of(st.sampled_from([0, 1, 2, 3, 4, 5, 7, 8, 64, 512, 513, 1024, 1025, 2**31, 2**32 - 1]),
                   st.integers(0, 2**32 - 1))
VALUES = st.one_of(COUNTS, st.text(max_size=12), st.booleans(), st.floats(allow_nan=True, width=32),
                   st.lists(st.integers(0, 9), min_size=1, max_size=4))
METADATA = {
    **{f"llama.{k}": COUNTS for k in ("block_count", "context_length", "embedding_length", "feed_forward_length",
                                     "attention.head_count", "attention.head_count_kv", "expert_count",
                                     "expert_used_count", "expert_group_count", "expert_group_used_count",
                                     "nextn_predict_layers", "rope.dimension_count", "vocab_size")},
    **{f"tokenizer.ggml.{k}_token_id": COUNTS for k in ("bos", "eos", "unknown", "padding", "eot")},
    "llama.rope.scaling.type": st.sampled_from(["none", "linear", "yarn", "longrope", "", "bogus", "YARN"]),
    "tokenizer.ggml.model": st.sampled_from(["gpt2", "llama", "t5", "bert", "rwkv", "none", "bogus", ""]),
    "tokenizer.ggml.pre": st.sampled_from(["default", "qwen2", "llama-bpe", "bogus", ""]),
    "general.architecture": st.sampled_from(["llama", "qwen2", "gemma3", "bogus", ""]),
}


@st.composite
def crafted_models(draw):
    """Keyword arguments for tiny_gguf.write: metadata given values of any type,
    and a token table with tokens dropped, repeated, emptied or renamed."""
    keys = draw(st.lists(st.sampled_from(sorted(METADATA)), min_size=1, max_size=3, unique=True))
    metadata = {k: draw(st.one_of(METADATA[k], VALUES)) for k in keys}
    tokens = [*tiny_gguf.byte_tokens(), "Ġt", "he", "<|endoftext|>"]
    for op, i, text in draw(st.lists(st.tuples(st.sampled_from(["drop", "repeat", "empty", "rename"]),
                                               st.integers(0, 255), st.text(max_size=6)), max_size=3)):
        i %= len(tokens)
        tokens = {"drop": tokens[:i] + tokens[i + 1:], "repeat": tokens + [tokens[i]],
                  "empty": tokens[:i] + [""] + tokens[i + 1:], "rename": tokens[:i] + [text] + tokens[i + 1:]}[op]
    return {"metadata": metadata, "tokens": tokens or None}


@pytest.mark.slow
@settings(max_examples=max(FUZZ_EXAMPLES // 6, 8), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(crafted_models())
def test_crafted_metadata_is_refused_in_one_line_or_runs(tmp_path, model):
    """Structure-aware: well-formed files that say nonsense, through the whole CLI."""
    path = tiny_gguf.write(tmp_path / "crafted.gguf", **model)
    r = edgespec_generate(path)
    assert r.returncode in (0, 1), (model, r.returncode, r.stderr[-400:])
    if r.returncode == 1:
        assert_one_line_error(r, "")


def test_a_layer_count_without_its_layers_is_refused(tmp_path):
    path = tiny_gguf.write(tmp_path / "short.gguf", block_count=5)  # 2 layers of tensors
    with pytest.raises(ModelError, match="no tensors for layer 4"):
        check_gguf(path)


@pytest.fixture(scope="module")
def header(tiny):
    data = tiny.read_bytes()
    return data, min(int(t.data_offset) for t in read_gguf(tiny).tensors)


@pytest.mark.slow
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
        check_model_file(path)
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
        check_model_file(path)
    except ModelError:
        return
    assert load_in_llama_cpp(path) >= 0
