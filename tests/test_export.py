"""`edgespec export`: a tiny checkpoint built here goes to ONNX and GGUF, each
export validates itself against its source, loads in its runtime and generates."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("optimum.exporters.onnx", reason="export extras not installed")

from edgespec.export.pipeline import ExportPlan, run_export  # noqa: E402
from edgespec.export.source import ExportError  # noqa: E402
from helpers import edgespec  # noqa: E402
from tiny_hf import build  # noqa: E402


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def checkpoint(request, tmp_path_factory):
    return build(tmp_path_factory.mktemp(request.param) / "ckpt", request.param)


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    """One checkpoint, for what does not depend on the architecture."""
    return build(tmp_path_factory.mktemp("llama") / "ckpt")


def export(checkpoint, tmp_path, to, quant):
    return run_export(ExportPlan(str(checkpoint), to, tmp_path / f"{to}-{quant}", quant), quiet=True)


def test_onnx_fp32_matches_its_source_and_generates(checkpoint, tmp_path):
    from edgespec.api import EdgeSpec

    m = export(checkpoint, tmp_path, "onnx", "fp32")
    v = m["validation"]
    assert v["top1_agreement"] == 1.0 and v["max_abs_dlogit"] < 1e-3
    assert m["parameters"] > 0 and m["size_bytes"] > 0 and len(m["source_sha256"]) == 64
    saved = json.loads((tmp_path / "onnx-fp32" / "manifest.json").read_text())
    assert saved["format"] == "onnx" and saved["quantization"] == "fp32"
    llm = EdgeSpec(str(tmp_path / "onnx-fp32"), drafter="none", n_ctx=256)
    plain = llm.generate("def add(a, b):", max_tokens=24)
    assert plain.token_ids, "nothing generated"
    # speculation on the ONNX backend gives the same greedy tokens
    spec = EdgeSpec(llm.backend, drafter="lookup").generate("def add(a, b):", max_tokens=24)
    assert spec.token_ids == plain.token_ids


def test_onnx_export_reads_the_kv_cache_without_repeating_its_heads(checkpoint, tmp_path):
    """4 query heads share 2 KV heads here. transformers repeats each KV head for its
    queries (an Expand of the whole cache every run) and concatenates the cache with
    each run's rows (a Concat); the export folds the queries instead and fuses each
    layer's attention into one GroupQueryAttention that writes the cache in place,
    and the logits stay the source's."""
    import onnx

    m = export(checkpoint, tmp_path, "onnx", "fp32")
    assert m["gqa_folded"] == 2 * 2  # K and V of both layers
    assert m["gqa_fused"] == 2  # both layers
    assert m["validation"]["top1_agreement"] == 1.0 and m["validation"]["max_abs_dlogit"] < 1e-3
    g = onnx.load(str(tmp_path / "onnx-fp32" / "model.onnx")).graph
    assert [n.op_type for n in g.node].count("GroupQueryAttention") == 2
    readers = {n.op_type for n in g.node for i in n.input if i.startswith("past_key_values.")}
    assert readers == {"GroupQueryAttention"}  # no Concat, Expand or Shape of the cache


def test_onnx_cache_is_written_in_place_and_rollback_copies_nothing(checkpoint, tmp_path):
    """The cache is one buffer per layer as long as the context, bound as both the
    graph's past and present: a rejected draft is rolled back by counting fewer rows,
    and what follows overwrites them and reads as if they had never been evaluated."""
    from edgespec.runtimes import open_backend

    export(checkpoint, tmp_path, "onnx", "fp32")
    ids = list(range(3, 43))
    with open_backend(tmp_path / "onnx-fp32", n_ctx=256) as b:
        buffers = [kv.data_ptr() for kv in b._kv]
        straight = np.array(b.eval(ids))
        b.rollback(0)
        b.eval(ids[:20])
        b.eval([7, 8, 9, 10, 11])  # a draft, rejected whole
        b.rollback(20)
        after = np.array(b.eval(ids[20:]))
        for _ in range(20):  # rejected drafts, one after another
            b.eval([5] * 4)
            b.rollback(40)
        last = np.array(b.eval([6]))
        assert [kv.data_ptr() for kv in b._kv] == buffers  # the same buffers all along
        assert b.memory()["kv_cache"] == 256 * b.kv_bytes_per_token()  # reserved for the context
        b.rollback(0)
        b.eval(ids)
        clean = np.array(b.eval([6]))
    assert np.abs(after - straight[20:]).max() < 1e-4 * np.abs(straight).max()
    assert np.abs(last - clean).max() < 1e-4 * np.abs(clean).max()


def test_onnx_runtime_follows_another_thread_count_from_the_cache_it_has(checkpoint, tmp_path):
    """ONNX Runtime fixes a session's thread pool when it builds it, so the backend asked
    for another count (the engine fits it to the cores other programs leave) builds the
    session again and decodes on from its own cache, with the batch costs of that count."""
    from edgespec.runtimes import open_backend

    export(checkpoint, tmp_path, "onnx", "fp32")
    ids = list(range(3, 43))
    with open_backend(tmp_path / "onnx-fp32", n_ctx=256, threads=2) as b:
        straight = np.array(b.eval(ids))
        key_2 = b.cost_key()
        b.rollback(20)
        assert b.set_threads(1) and b.n_threads == 1
        after = np.array(b.eval(ids[20:]))
        assert b.cost_key() != key_2
    assert np.abs(after - straight[20:]).max() < 1e-4 * np.abs(straight).max()


def test_a_long_prompt_is_read_in_chunks_holding_only_the_last_chunks_logits(checkpoint, tmp_path, monkeypatch):
    """The graph returns logits for every input row; a prompt whose logits are wanted
    only at its end is run in chunks, so a long one never holds a row per token."""
    from edgespec.runtimes import onnxruntime, open_backend

    export(checkpoint, tmp_path, "onnx", "fp32")
    ids = list(range(3, 43))
    monkeypatch.setattr(onnxruntime, "PREFILL_CHUNK", 8)
    with open_backend(tmp_path / "onnx-fp32", n_ctx=256) as b:
        last = np.array(b.eval(ids, n_logits=1))
        assert b.n_past == 40 and b.memory()["logits"] == 8 * b.n_vocab * 4  # 8 rows held at most
        b.rollback(0)
        whole = np.array(b.eval(ids))  # every row's logits asked for: one run
    assert np.abs(last[0] - whole[-1]).max() < 1e-4 * np.abs(whole).max()


def test_an_older_onnx_export_masks_rejected_rows_and_compacts_them_later(checkpoint, tmp_path):
    """Exports made before attention was fused concatenate the cache every run. Rolling
    back copies nothing at first: the rejected draft's rows stay, masked out, and what
    follows reads as if they had never been evaluated. Once the masked rows pass an
    eighth of the cache they are dropped."""
    from edgespec.export.onnx_attention import fold_grouped_query_attention
    from edgespec.export.onnx_export import export_onnx
    from edgespec.runtimes.onnxruntime import OnnxBackend

    folder = tmp_path / "older"
    export_onnx(checkpoint, folder)
    fold_grouped_query_attention(folder / "model.onnx", 4, 2)
    ids = list(range(3, 43))
    b = OnnxBackend(folder / "model.onnx", n_ctx=256)
    straight = np.array(b.eval(ids))
    b.rollback(0)
    b.eval(ids[:20])
    b.eval([7, 8, 9, 10, 11])  # a draft, rejected whole
    b.rollback(20)
    assert b.n_past == 20 and b.memory()["kv_cache"] == 25 * b.kv_bytes_per_token()  # masked, not copied
    after = np.array(b.eval(ids[20:]))
    for _ in range(20):  # rejected drafts pile up until the cache is compacted
        b.eval([5] * 4)
        b.rollback(40)
    assert b.memory()["kv_cache"] < (40 + 64 + 4) * b.kv_bytes_per_token()
    last = np.array(b.eval([6]))
    b.rollback(0)
    b.eval(ids)
    clean = np.array(b.eval([6]))
    b.close()
    assert np.abs(after - straight[20:]).max() < 1e-4 * np.abs(straight).max()
    assert np.abs(last - clean).max() < 1e-4 * np.abs(clean).max()


@pytest.mark.parametrize("quant", ["int8", "int8-weight-only", "int4", "int4-b128", "int4-f32"])
def test_onnx_quantized_exports_load_and_stay_close(checkpoint, tmp_path, quant):
    from edgespec.api import EdgeSpec

    m = export(checkpoint, tmp_path, "onnx", quant)
    assert m["quantization"] == quant
    assert m["validation"]["perplexity_ratio"] < 2.0
    assert EdgeSpec(str(tmp_path / f"onnx-{quant}"), drafter="none", n_ctx=256).generate("for i", max_tokens=8).token_ids


def test_one_loaded_source_serves_a_quantized_onnx_export_and_then_a_gguf_one(llama, tmp_path):
    """Quantizing ONNX drops the source model for the room it needs (a 1.5B model's float32
    graph and the model itself do not fit in 24 GB together); the next export loads it again."""
    from edgespec.export.pipeline import Stages, load_source

    loaded = load_source(str(llama), tmp_path / "x", Stages(quiet=True))
    try:
        onnx = run_export(ExportPlan(str(llama), "onnx", tmp_path / "onnx", "int4"), quiet=True, loaded=loaded)
        gguf = run_export(ExportPlan(str(llama), "gguf", tmp_path / "gguf", "q8_0"), quiet=True, loaded=loaded)
    finally:
        loaded.close()
    assert onnx["parameters"] == gguf["parameters"]
    assert onnx["validation"]["perplexity_ratio"] < 2.0 and gguf["validation"]["perplexity_ratio"] < 2.0


def test_int4_computes_in_int8_unless_float32_compute_is_asked_for(llama, tmp_path):
    import onnx

    def compute_levels(quant: str) -> set[int]:
        export(llama, tmp_path, "onnx", quant)
        model = onnx.load(tmp_path / f"onnx-{quant}" / "model.onnx")
        inits = {t.name: t.data_type for t in model.graph.initializer}
        nodes = [n for n in model.graph.node if n.op_type == "MatMulNBits"]
        assert nodes
        zero_points = [inits[n.input[3]] for n in nodes if len(n.input) > 3 and n.input[3]]
        assert zero_points and set(zero_points) == {onnx.TensorProto.UINT8}  # integers: the fast kernels
        return {a.i for n in nodes for a in n.attribute if a.name == "accuracy_level"} or {0}

    assert compute_levels("int4") == {4}  # int8 activations: single steps at llama.cpp's pace
    assert compute_levels("int4-f32") == {0}  # float32: every block dequantized, cheap extra rows


def quantized_products(k: int, widths: dict[str, int], config=None):
    """A graph of float32 products of one input X [1, 5, k], one per output name and width,
    quantized by onnxruntime (HQQ's 4 bits in blocks of 32, float zero points, unless another
    `config` is given); and an input for it whose channel 3 is an outlier, as in a real
    model's activations."""
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization.matmul_nbits_quantizer import HQQWeightOnlyQuantConfig, MatMulNBitsQuantizer

    rng = np.random.default_rng(0)
    ws = [numpy_helper.from_array(rng.normal(size=(k, n)).astype(np.float32), "W" + y) for y, n in widths.items()]
    graph = helper.make_graph([helper.make_node("MatMul", ["X", "W" + y], [y]) for y in widths], "g",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, None, k])],
                              [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, None, n]) for y, n in widths.items()],
                              ws)
    q = MatMulNBitsQuantizer(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
                             algo_config=config or HQQWeightOnlyQuantConfig(block_size=32, bits=4))
    q.process()
    x = rng.normal(size=(1, 5, k)).astype(np.float32)
    x[..., 3] *= 30
    return q.model.model, x


def run_graph(model, x: np.ndarray) -> list[np.ndarray]:
    import onnxruntime as ort

    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"X": x})


def op_types(model) -> list[str]:
    return [n.op_type for n in model.graph.node]


@pytest.mark.parametrize("k", [96, 80])  # whole blocks of 32, and a last block padded
def test_hqq_weights_as_integer_zero_points_plus_block_residuals_compute_the_same_product(k):
    """HQQ's float zero points have no fast kernel in ONNX Runtime, so the export writes
    (q - z) s as (q - round(z)) s plus a residual per block: the same product, to float rounding."""
    from edgespec.export.onnx_export import _integer_zero_points

    model, x = quantized_products(k, {"Y": 48})
    hqq = run_graph(model, x)[0]
    _integer_zero_points(model)
    assert op_types(model).count("MatMulNBits") == 1
    assert np.abs(run_graph(model, x)[0] - hqq).max() < 1e-4 * np.abs(hqq).max()


def test_8_bit_residuals_move_an_int8_product_far_less_than_its_int8_activations_do():
    """Computing in int8, the residuals are read as 8-bit MatMulNBits: a quarter of the bytes,
    for an error well inside the one int8 activations already make."""
    from edgespec.export.onnx_export import _compute_in_int8, _integer_zero_points, _residuals_in_8_bits

    model, x = quantized_products(512, {"Y": 64})
    exact = run_graph(model, x)[0]
    _integer_zero_points(model)
    _compute_in_int8(model)
    float_residuals = run_graph(model, x)[0]
    _residuals_in_8_bits(model)
    assert op_types(model).count("MatMulNBits") == 2 and "MatMul" not in op_types(model)
    eight_bit = run_graph(model, x)[0]
    assert np.abs(eight_bit - float_residuals).max() < 0.1 * np.abs(float_residuals - exact).max()


@pytest.mark.parametrize("quant", ["int4", "int8"])
def test_products_of_one_input_run_as_one_wide_product_with_the_same_outputs(quant):
    """q, k and v (or gate and up) read the same input: the export joins them into one
    MatMulNBits and splits its output, zero points and residuals included, and every output
    stays the same."""
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig

    from edgespec.export.onnx_export import _compute_in_int8, _integer_zero_points, _one_product_per_input

    symmetric_8_bit = DefaultWeightOnlyQuantConfig(block_size=16, bits=8, is_symmetric=True, accuracy_level=4)
    model, x = quantized_products(96, {"Q": 64, "K": 16, "V": 16}, None if quant == "int4" else symmetric_8_bit)
    if quant == "int4":
        _integer_zero_points(model)
        _compute_in_int8(model)
    apart = run_graph(model, x)
    _one_product_per_input(model)
    onnx.checker.check_model(model)
    assert op_types(model).count("MatMulNBits") == 1
    for a, b in zip(apart, run_graph(model, x)):
        assert np.abs(a - b).max() <= 1e-5 * np.abs(a).max()


def test_bench_runs_onnx_exports_beside_llama_cpp_and_says_which_decodes_fastest(llama, tmp_path):
    """Two representations of one model (4-bit computing in int8, and in float32) beside
    llama.cpp: rows per export, each runtime's batch-cost curve, and the fastest per category."""
    export(llama, tmp_path, "gguf", "f16")
    export(llama, tmp_path, "onnx", "int4")
    export(llama, tmp_path, "onnx", "int4-f32")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"category": "code", "prompt": "def add(a, b): return a + b\n" * 3}) + "\n")
    r = edgespec("bench", "-m", tmp_path / "gguf-f16", "--onnx", f"{tmp_path / 'onnx-int4'},{tmp_path / 'onnx-int4-f32'}",
                 "--drafters", "lookup", "--peers", "none", "-n", "8", "--ctx", "256", "--prompts", prompts,
                 "--json", tmp_path / "run.json")
    assert r.returncode == 0, r.stderr
    rows = json.loads((tmp_path / "run.json").read_text())["rows"]
    names = {row["drafter"] for row in rows}
    assert {"plain", "lookup", "onnx-int4:plain", "onnx-int4:lookup", "onnx-int4-f32:plain", "onnx-int4-f32:lookup"} <= names
    with_curve = {r["drafter"] for r in rows if r["category"] == "all" and "plain" in r["drafter"] and r.get("batch_costs_ms")}
    assert with_curve == {"plain", "onnx-int4:plain", "onnx-int4-f32:plain"}  # the docs' curve table reads these
    said = r.stdout + r.stderr
    lines = said.splitlines()
    for runtime in ("", "onnx-int4 ", "onnx-int4-f32 "):
        assert any(line.startswith(f"{runtime}batch cost timed after each category") for line in lines), runtime
    assert "code: " in said and "decodes fastest end to end" in said


def test_int8_dynamic_quantizes_each_tokens_activations_on_its_own(checkpoint, tmp_path):
    """A token's logits do not depend on what else shares its batch: one activation
    scale for a whole batch would let its largest activation (often the first
    token's) set every token's precision, and a prompt read in one batch would
    then differ from the same prompt decoded token by token."""
    from edgespec.runtimes import open_backend

    m = export(checkpoint, tmp_path, "onnx", "int8-dynamic")
    assert m["validation"]["decode_ms"] > 0
    ids = list(range(3, 40))
    with open_backend(tmp_path / "onnx-int8-dynamic", n_ctx=64) as b:
        batch = np.array(b.eval(ids))
        b.rollback(0)
        one_by_one = np.array([b.eval([t])[0] for t in ids])
    assert np.abs(batch - one_by_one).max() < 1e-3 * np.abs(batch).max()


def test_gguf_f16_matches_its_source_in_llama_cpp(checkpoint, tmp_path):
    m = export(checkpoint, tmp_path, "gguf", "f16")
    assert m["validation"]["top1_agreement"] >= 0.99  # f16 weights: only rounding differs
    assert m["validation"]["max_abs_dlogit"] < 0.1


@pytest.mark.parametrize("quant", ["q8_0", "q4_k_m", "q4_0"])
def test_gguf_quantized_by_llama_cpp(checkpoint, tmp_path, quant):
    from edgespec.models.gguf_check import check_gguf

    m = export(checkpoint, tmp_path, "gguf", quant)
    f16 = export(checkpoint, tmp_path, "gguf", "f16")
    assert m["size_bytes"] < f16["size_bytes"]
    check_gguf(tmp_path / f"gguf-{quant}" / "model.gguf")
    assert m["validation"]["perplexity_ratio"] < 2.0


def test_a_failed_export_leaves_nothing_behind(checkpoint, tmp_path):
    with pytest.raises(ExportError, match="quant"):
        run_export(ExportPlan(str(checkpoint), "onnx", tmp_path / "out", "q4_k_m"), quiet=True)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("to,quant", [("onnx", "fp32"), ("gguf", "f16")])
def test_an_export_changed_after_it_was_written_is_refused_before_loading(checkpoint, tmp_path, to, quant):
    from edgespec.models.store import resolve

    export(checkpoint, tmp_path, to, quant)
    folder = tmp_path / f"{to}-{quant}"
    files = json.loads((folder / "manifest.json").read_text())["files"]
    assert f"model.{to}" in files and all(len(d) == 64 for d in files.values())
    assert resolve(str(folder)) is not None  # as written, it passes (and the pass is remembered)
    if to == "onnx":  # the tokenizer sits beside an ONNX graph (a GGUF carries its own)
        tokenizer = (folder / "tokenizer.json").read_bytes()
        (folder / "tokenizer.json").unlink()
        assert "tokenizer.json is missing" in edgespec("generate", "hi", "-m", folder).stderr
        (folder / "tokenizer.json").write_bytes(tokenizer)
    with open(folder / f"model.{to}", "r+b") as f:  # one byte flipped in the middle of the weights
        f.seek(f.seek(0, 2) // 2)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0xFF]))
    r = edgespec("generate", "hi", "-m", folder)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert f"model.{to} does not match its manifest" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_a_broken_onnx_graph_is_refused_by_the_onnx_checker(checkpoint, tmp_path):
    export(checkpoint, tmp_path, "onnx", "fp32")
    folder = tmp_path / "onnx-fp32"
    (folder / "manifest.json").unlink()  # no digests to compare: the checker alone must catch it
    data = (folder / "model.onnx").read_bytes()
    (folder / "model.onnx").write_bytes(data[: len(data) // 3])  # truncated mid-graph
    r = edgespec("generate", "hi", "-m", folder)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "is not a valid ONNX model" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "edgespec", "export", *map(str, args)], capture_output=True,
                          text=True)


def test_bad_export_input_gives_one_line_errors(checkpoint, tmp_path):
    bad_arch = tmp_path / "gpt2"
    bad_arch.mkdir()
    (bad_arch / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    no_tok = tmp_path / "notok"
    no_tok.mkdir()
    (no_tok / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (no_tok / "model.safetensors").write_bytes(b"")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    cases = [
        ((bad_arch, "--to", "onnx", "-o", tmp_path / "o1"), "architecture 'gpt2' is not supported"),
        ((no_tok, "--to", "onnx", "-o", tmp_path / "o2"), "no tokenizer.json"),
        ((checkpoint, "--to", "gguf", "-q", "int4", "-o", tmp_path / "o3"), "does not apply to gguf"),
        ((checkpoint, "--to", "onnx", "-o", locked / "sub" / "o4"), "does not exist"),
        ((tmp_path / "missing", "--to", "onnx", "-o", tmp_path / "o5"), "not found"),
        ((checkpoint, "--to", "ternary", "--trim-vocab", "64", "-o", tmp_path / "o7"), "not to ternary exports"),
        ((checkpoint, "--to", "ternary", "-q", "q8_0", "-o", tmp_path / "o8"), "does not apply to ternary"),
    ]

    # root writes to any folder whatever its mode, but not into a read-only file system such as /proc
    unwritable = locked if os.geteuid() != 0 else Path("/proc")
    cases.append(((checkpoint, "--to", "onnx", "-o", unwritable / "o6"), "not writable"))
    for args, message in cases:
        r = _cli(*args)
        assert r.returncode == 1, r.stderr
        assert message in r.stderr and "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_force_replaces_only_an_earlier_export_never_a_folder_of_ones_own(llama, tmp_path):
    checkpoint = llama
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    r = _cli(checkpoint, "--to", "gguf", "-o", mine, "--force")
    assert r.returncode == 1 and "is not an edgespec export" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert [f.name for f in mine.iterdir()] == ["notes.txt"] and (mine / "notes.txt").read_text() == "keep me"
    source = tmp_path / "source"  # a checkpoint that happens to sit in an export folder
    shutil.copytree(checkpoint, source)
    (source / "manifest.json").write_text("{}")
    r = _cli(source, "--to", "gguf", "-o", source, "--force")
    assert r.returncode == 1 and "holds the source of this export" in r.stderr
    assert sorted(f.name for f in source.iterdir()) == sorted([f.name for f in checkpoint.iterdir()] + ["manifest.json"])


def test_a_kill_at_any_moment_of_a_forced_export_leaves_a_loadable_export(llama, tmp_path):
    checkpoint = llama
    from edgespec.files import sweep
    from edgespec.models.store import resolve

    out = tmp_path / "out"
    args = [sys.executable, "-m", "edgespec", "export", str(checkpoint), "--to", "gguf", "--no-validate",
            "-o", str(out), "--force"]
    subprocess.run(args, check=True, capture_output=True)
    for delay in (0.5, 2.0, 4.0, 8.0):  # loading the source, converting, writing, renaming
        p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        p.kill()
        p.wait()
        sweep(out)  # what the next export, trim or fetch beside it does first
        assert resolve(str(out)) is not None  # the old export or the new one, whole


def test_a_replacement_killed_between_its_two_renames_is_undone_by_the_next_sweep(tmp_path, monkeypatch):
    from edgespec import files

    target, new = tmp_path / "export", tmp_path / "new"
    target.mkdir()
    (target / "manifest.json").write_text("old")
    new.mkdir()
    (new / "manifest.json").write_text("new")
    real_replace, calls = os.replace, []

    def killed_at_the_second(src, dst):
        calls.append(src)
        if len(calls) == 2:
            raise KeyboardInterrupt  # the process dies with the old export aside, the new one not in
        real_replace(src, dst)

    monkeypatch.setattr(files.os, "replace", killed_at_the_second)
    with pytest.raises(KeyboardInterrupt):
        files.replace_folder(new, target)
    monkeypatch.setattr(files.os, "replace", real_replace)
    assert not target.exists()
    monkeypatch.setattr(files, "_alive", lambda pid: False)  # that process is gone
    files.sweep(target)
    assert (target / "manifest.json").read_text() == "old"


@pytest.mark.parametrize("to,quant", [("onnx", "fp32"), ("gguf", "f16")])
def test_vocab_trimmed_drafter_keeps_speculation_lossless(checkpoint, tmp_path, to, quant):
    from helpers import always_draft
    from edgespec.api import EdgeSpec
    from edgespec.drafters import ModelDrafter, make_drafter
    from edgespec.speculative.engine import Engine

    k = 120
    m = run_export(ExportPlan(str(checkpoint), to, tmp_path / "trim", quant, trim_vocab=k), quiet=True)
    assert m["trim_k"] == k and 0 < m["trim"]["coverage"] <= 1
    kept = json.loads((tmp_path / "trim" / "vocab_map.json").read_text())["ids"]
    assert len(kept) == k == len(set(kept))
    # the full model is the target; the trimmed export of the same model drafts for it
    export(checkpoint, tmp_path, to, quant)
    target = EdgeSpec(str(tmp_path / f"{to}-{quant}"), drafter="none", n_ctx=256)
    plain = target.generate("def add(a, b):", max_tokens=32).token_ids
    drafter = make_drafter(str(tmp_path / "trim"), 0, always_draft(8), target.tokenizer, n_ctx=256)
    assert isinstance(drafter, ModelDrafter)
    drafter.p_min = 0.0  # draft even when unsure: a random tiny model is, and every draft must still verify
    engine = Engine(target.backend, drafter, controller=always_draft(8), calibrate=False)
    engine.reset()
    assert list(engine.generate(target.tokenize("def add(a, b):"), 32)) == plain
    assert engine.last_stats.drafted > 0 and engine.last_stats.accepted > 0
    with pytest.raises(Exception, match="trimmed vocabulary"):
        EdgeSpec(str(tmp_path / "trim"), drafter="none")  # a trimmed model drafts; it cannot be the target


def test_a_trimmed_gguf_reads_dropped_context_tokens_as_the_full_model_does(checkpoint, tmp_path):
    import numpy as np

    from edgespec.runtimes import open_backend

    run_export(ExportPlan(str(checkpoint), "gguf", tmp_path / "trim", "f16", trim_vocab=120), quiet=True)
    export(checkpoint, tmp_path, "gguf", "f16")
    kept = np.array(json.loads((tmp_path / "trim" / "vocab_map.json").read_text())["ids"])
    with open_backend(tmp_path / "gguf-f16" / "model.gguf", n_ctx=64) as full:
        dropped = [i for i in range(full.n_vocab) if i not in set(kept.tolist())][:6]
        ids = [int(kept[3]), *dropped, int(kept[5]), int(kept[7])]
        want = np.array(full.eval(ids))[:, kept]
    with open_backend(tmp_path / "trim" / "model.gguf", n_ctx=64) as trimmed:
        assert trimmed.n_vocab == len(kept)  # logits for the kept tokens only
        got = np.array(trimmed.eval(ids))  # target ids in, dropped ones included
    assert len(dropped) == 6
    np.testing.assert_allclose(got, want, atol=1e-3)  # the same model after the same context (logits ~1.3)


def test_trim_larger_than_the_vocabulary_is_refused(checkpoint, tmp_path):
    r = _cli(checkpoint, "--to", "gguf", "--trim-vocab", "100000", "-o", tmp_path / "big")
    assert r.returncode == 1 and "larger than the vocabulary" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "big").exists()
