"""The FPGA table-lookup simulation: TLMM is bit-exact, a ternarized decoder runs
through it with speculation lossless, and the cycle model set to TeLLMe v2's
configuration lands on the paper's published figures."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from helpers import always_draft
from edgespec.drafters import make_drafter
from edgespec.runtimes.fpga.cost import TELLME_PUBLISHED, tellme_cost_model
from edgespec.runtimes.fpga.sim import FpgaSimBackend, TernaryModel
from edgespec.runtimes.fpga.tlmm import int_matmul, pack, patterns, quantize_activations, ternarize, tlmm, unpack
from edgespec.runtimes.reference import ReferenceModel
from edgespec.speculative.engine import Engine


@st.composite
def ternary_problem(draw):
    g = draw(st.sampled_from([3, 4]))
    n_tok, n_out, n_in = draw(st.integers(1, 5)), draw(st.integers(1, 24)), draw(st.integers(1, 40))
    w = draw(hnp.arrays(np.int8, (n_out, n_in), elements=st.integers(-1, 1)))
    x = draw(hnp.arrays(np.int8, (n_tok, n_in), elements=st.integers(-127, 127)))
    return g, w, x


@settings(max_examples=300, deadline=None)
@given(ternary_problem())
def test_tlmm_is_bit_exact_against_an_integer_matmul(problem):
    g, w, x = problem  # any shape, including inputs that are not a multiple of G
    packed = pack(w, g)
    assert np.array_equal(unpack(packed), w)
    assert np.array_equal(tlmm(x, packed), int_matmul(x, w))


def test_sign_symmetry_halves_the_table():
    assert len(patterns(3)) == (3**3 + 1) // 2 == 14 and len(patterns(4)) == 41
    assert not patterns(3)[0].any()  # entry 0 is the empty pattern


def test_extreme_activations_do_not_overflow():
    n_in = 4096 * 3
    w = np.ones((2, n_in), np.int8)
    w[1] = -1
    x = np.full((1, n_in), 127, np.int8)
    assert tlmm(x, pack(w, 3)).tolist() == [[127 * n_in, -127 * n_in]]


@pytest.mark.real_model
def test_tlmm_is_bit_exact_on_real_layers_of_a_ternarized_qwen2_5_coder_0_5b():
    """Layer 0's projections of the real model, ternarized (absmean), fed the real
    inputs of that layer: RMS-normed embeddings of real tokens, quantized to int8."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    from edgespec.models.store import resolve

    reader = GGUFReader(resolve("qwen2.5-coder-0.5b", quiet=True))
    tensors = {t.name: t for t in reader.tensors}

    def weight(name):
        t = tensors[name]
        return dequantize(t.data, t.tensor_type).reshape([int(d) for d in reversed(t.shape)]).astype(np.float32)

    emb = weight("token_embd.weight")
    norm = weight("blk.0.attn_norm.weight")
    vocab = {bytes(reader.fields["tokenizer.ggml.tokens"].parts[i]).decode(): n
             for n, i in enumerate(reader.fields["tokenizer.ggml.tokens"].data)}
    words = ["The", "Ġcache", "Ġkeeps", "Ġrecently", "Ġused", "Ġpages", "Ġin", "Ġmemory", "."]
    tokens = [vocab[w] for w in words]  # "The cache keeps recently used pages in memory." in Qwen's vocabulary
    h = emb[tokens]
    h = h / np.sqrt(np.mean(h * h, axis=1, keepdims=True) + 1e-6) * norm
    xq, _ = quantize_activations(h)
    checked = 0
    for name in ("attn_q", "attn_k", "attn_v", "ffn_gate", "ffn_up"):
        w = weight(f"blk.0.{name}.weight")
        wq, scale = ternarize(w)
        assert 0.2 < np.mean(wq == 0) < 0.8  # a real ternary split, not all zeros
        for g in (3, 4):
            assert np.array_equal(tlmm(xq, pack(wq, g, scale)), int_matmul(xq, wq)), (name, g)
            checked += 1
    assert checked == 10


@pytest.fixture(scope="module")
def ternary_model():
    return TernaryModel(ReferenceModel(seed=7))


@pytest.fixture(scope="module")
def plain_on_fpga_sim(ternary_model):
    """Each prompt (repeated, so n-gram drafters find matches) and its plain decoding on the simulation."""
    from prompts import PROMPTS

    plain = Engine(FpgaSimBackend(ternary_model))
    runs = []
    for prompt in PROMPTS[:8]:
        ids = plain.backend.tokenizer.encode(prompt * 2)
        plain.reset()
        runs.append((ids, list(plain.generate(ids, 32))))
    return runs


@pytest.mark.parametrize("drafter", ["lookup", "ngram", "recycle", "auto"])
def test_speculation_on_fpga_sim_equals_plain_decoding_on_it(ternary_model, plain_on_fpga_sim, drafter):
    backend = FpgaSimBackend(ternary_model)
    controller = always_draft(8)  # verify every proposal in full
    engine = Engine(backend, make_drafter(drafter, backend.n_vocab, controller), controller=controller,
                    calibrate=False, clock=backend)
    drafted = accepted = 0
    for ids, expected in plain_on_fpga_sim:
        engine.reset()
        assert list(engine.generate(ids, 32)) == expected, backend.tokenizer.decode(ids)[:30]
        drafted += engine.last_stats.drafted
        accepted += engine.last_stats.accepted
    assert drafted > 0
    # batches of several tokens were evaluated, and the simulated board time was counted for them
    assert max(n for n, _, _ in backend.calls) > 1 and backend.simulated_s > 0


def test_the_cycle_model_reproduces_tellme_v2_within_twenty_percent():
    model = tellme_cost_model()
    figures = {
        "decode_tokens_per_s": model.decode_tokens_per_s(context=128),
        "ttft_64_s": model.prefill_seconds(64),
        "ttft_128_s": model.prefill_seconds(128),  # not used in calibration: a prediction
    }
    for key, value in figures.items():
        assert abs(value / TELLME_PUBLISHED[key] - 1) < 0.20, (key, value, TELLME_PUBLISHED[key])


def test_the_tellme_design_fits_the_kv260_and_one_the_board_cannot_hold_is_refused():
    """The design's rates are fabric: lanes take LUTs and the BRAM that streams their
    weights, attention takes DSPs. More lanes buy a faster (compute-bound) prefill,
    not a faster (bandwidth-bound) decode."""
    from dataclasses import replace

    from edgespec.runtimes.fpga.cost import BITNET_0_73B, KV260, TELLME, CostModel, DesignDoesNotFit, widest_cost_model

    tellme = tellme_cost_model()
    use = tellme.resources.utilization()
    assert tellme.resources.fits and 0 < use["LUT"] < 0.5 and 0 < use["DSP"] < 0.5
    widest, limit = widest_cost_model(KV260, TELLME, BITNET_0_73B)
    lanes = widest.design.lookups_per_cycle
    assert limit == "BRAM36" and widest.resources.utilization()[limit] > 0.95
    assert widest.prefill_seconds(128) < tellme.prefill_seconds(128) / 2
    assert widest.decode_tokens_per_s(128) == pytest.approx(tellme.decode_tokens_per_s(128), rel=0.05)
    with pytest.raises(DesignDoesNotFit, match="BRAM36"):
        CostModel(KV260, replace(TELLME, lookups_per_cycle=lanes + 1), BITNET_0_73B)


def test_verifying_k_tokens_costs_like_a_short_prefill():
    model = tellme_cost_model()
    one = model.eval_cost(1, 256).seconds
    costs = [model.eval_cost(k, 256).seconds / one for k in (2, 4, 8, 16)]
    assert costs == sorted(costs) and costs[0] < 1.2  # decode is bandwidth-bound: a second token is cheap
    assert model.eval_cost(1, 256).bound == "bandwidth" and model.eval_cost(64, 0).bound == "compute"


@pytest.mark.real_model
def test_bench_on_fpga_sim_prints_simulated_figures_beside_measured_acceptance(smollm2_path, tmp_path):
    import json

    from helpers import edgespec

    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"category": "code", "prompt": "def add(a, b):\n    return a + b\n\ndef add("}) + "\n")
    r = edgespec("bench", "--backend", "fpga-sim", "-m", "smollm2-135m", "--prompts", str(prompts),
                 "--drafters", "lookup", "-n", "24", "--json", str(tmp_path / "rows.json"))
    assert r.returncode == 0, r.stderr
    assert "cycle model against TeLLMe v2's published figures" in r.stdout
    assert "the widest TLMM the kv260 holds: 1,036 lanes" in r.stdout
    rows = {(x["category"], x["method"]): x for x in json.loads((tmp_path / "rows.json").read_text())["rows"]}
    plain, lookup = rows[("code", "plain")], rows[("code", "lookup")]
    assert plain["acceptance"] is None and lookup["drafted"] > 0 and 0 <= lookup["acceptance"] <= 1
    assert 15 < plain["simulated_tokens_per_s"] < 35  # the board's decode rate for this shape
    assert plain["simulated_speedup"] == 1.0 and lookup["simulated_speedup"] > 0


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def ternary_export(request, tmp_path_factory):
    pytest.importorskip("optimum.exporters.onnx", reason="export extras not installed")
    from tiny_hf import build

    from edgespec.export.pipeline import ExportPlan, run_export

    root = tmp_path_factory.mktemp(f"ternary-{request.param}")
    checkpoint = build(root / "ckpt", request.param)
    manifest = run_export(ExportPlan(str(checkpoint), "ternary", root / "out"), quiet=True)
    return checkpoint, root / "out", manifest


def test_a_ternary_export_computes_what_transformers_computes_with_the_same_weights(ternary_export, monkeypatch):
    """The fpga-sim decoder is the checkpoint's architecture (rotary attention, grouped
    KV heads, SwiGLU, qwen2's biases): given the export's own ternary weights,
    transformers and fpga-sim agree to rounding in float, and the int8 activations of
    TLMM keep every argmax."""
    import torch
    from transformers import AutoModelForCausalLM

    import edgespec.runtimes.fpga.sim as fpga_sim

    checkpoint, folder, manifest = ternary_export
    assert manifest["format"] == "ternary" and manifest["quantization"] == "b1.58"
    assert 0.2 < manifest["ternary"]["ternary_zero_fraction"] < 0.5  # absmean: about a third are zero
    tl = fpga_sim.TernaryLlama(folder)
    hf = AutoModelForCausalLM.from_pretrained(checkpoint).eval()
    packed = {f"model.layers.{i}.{name}.weight": tl.layers[i][key] for i in range(tl.n_layer)
              for key, name in tl.PROJ.items()}
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if name in packed:
                p.copy_(torch.tensor(unpack(packed[name]) * packed[name].scale, dtype=torch.float32))
        ids = [5, 17, 33, 100, 42, 7, 250, 3, 61, 9]
        ref = hf(torch.tensor([ids])).logits[0].numpy()

    def run():
        kc, vc = tl.new_cache(64)
        return np.array([tl.logits(r) for r in tl.forward(np.array(ids), 0, kc, vc)])

    with monkeypatch.context() as m:  # float activations: the architecture alone
        m.setattr(fpga_sim, "ternary_linear", lambda x, w: x @ (unpack(w).astype(np.float64) * w.scale).T)
        assert np.abs(run() - ref).max() < 1e-4
    tlmm_logits = run()  # int8 activations through TLMM
    assert (tlmm_logits.argmax(1) == ref.argmax(1)).mean() >= 0.9


def test_speculation_on_a_ternary_export_is_lossless(ternary_export):
    from edgespec import EdgeSpec

    _, folder, _ = ternary_export
    plain = EdgeSpec(str(folder), drafter="none", n_ctx=256)
    assert plain.backend.name == "fpga-sim"
    prompt = "for i in range(10):\n    print(i * i)\nfor i in range(10):\n"
    expected = plain.generate(prompt, max_tokens=24).token_ids
    backend, ids = plain.backend, plain.tokenize(prompt)
    drafted = 0
    for drafter in ("lookup", "ngram", "recycle", "auto"):
        controller = always_draft(8)  # verify every proposal in full
        engine = Engine(backend, make_drafter(drafter, backend.n_vocab, controller), controller=controller,
                        calibrate=False, clock=backend)
        engine.reset()
        assert list(engine.generate(ids, 24)) == expected, drafter
        drafted += engine.last_stats.drafted
    assert drafted > 0
