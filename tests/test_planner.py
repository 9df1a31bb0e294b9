"""The memory model and the planner, on model facts alone (nothing is loaded)."""

import re
from dataclasses import replace

import pytest

from edgespec.drafters import REGISTRY
from edgespec.memory.footprint import ModelConfig, model_bytes, parse_bytes, predict
from edgespec.memory.plan import BudgetError, GpuMemory, PlanRequest
from edgespec.memory.planner import HEADROOM, plain_footprint, plan
from edgespec.models.facts import ModelFacts
from edgespec.speculative.drafter import Kind
from helpers import register_the_docs_drafter

MB = 1_000_000

# the shape of Qwen2.5-Coder-1.5B Q4_K_M and of SmolLM2-135M, as ModelFacts.from_gguf reads them
QWEN15 = ModelFacts(path="qwen.gguf", architecture="qwen2", n_layer=28, n_head=12, n_head_kv=2, n_embd=1536,
                    n_ff=8960, head_k=128, head_v=128, n_vocab=151936, n_tokens=303323,
                    tensor_bytes=1_111_371_000, file_bytes=1_117_320_000, repack_bytes=625_500_000,
                    n_ctx_train=32768)
SMOL = ModelFacts(path="smollm2.gguf", architecture="llama", n_layer=30, n_head=9, n_head_kv=3, n_embd=576,
                  n_ff=1536, head_k=64, head_v=64, n_vocab=49152, n_tokens=98052, tensor_bytes=96_570_000,
                  file_bytes=98_360_000, repack_bytes=0, n_ctx_train=8192)
BASE = 60 * MB


def test_kv_cache_follows_layers_heads_context_and_type():
    f16 = model_bytes(QWEN15, ModelConfig(n_ctx=4096), repack=True)["kv_cache"]
    assert f16 == 28 * 4096 * 2 * 128 * 2 * 2  # layers x cells x KV heads x (K + V) x f16, 112 MiB
    q8 = model_bytes(QWEN15, ModelConfig(n_ctx=4096, kv_type="q8_0"), repack=True)["kv_cache"]
    assert q8 == pytest.approx(f16 * 34 / 64)
    # llama.cpp pads the context to 256 cells
    assert model_bytes(QWEN15, ModelConfig(n_ctx=1000), repack=True)["kv_cache"] == f16 // 4


def test_mapped_weights_are_held_twice_where_llama_cpp_repacks_them():
    mapped = model_bytes(QWEN15, ModelConfig(load="mmap"), repack=True)
    read = model_bytes(QWEN15, ModelConfig(load="read"), repack=True)
    assert mapped["weights_mapped"] + mapped["weights_resident"] == QWEN15.file_bytes + QWEN15.repack_bytes
    assert read["weights_mapped"] == 0 and read["weights_resident"] == QWEN15.tensor_bytes


def test_draft_length_costs_logits_rows():
    one = model_bytes(QWEN15, ModelConfig(max_outputs=1), repack=True)["logits"]
    seventeen = model_bytes(QWEN15, ModelConfig(max_outputs=17), repack=True)["logits"]
    assert seventeen - one == 16 * 2 * 151936 * 4


def test_without_a_budget_the_request_is_kept():
    p = plan(PlanRequest(QWEN15, None, "auto", n_ctx=4096, max_draft=16, baseline=BASE, repack=True))
    assert (p.n_ctx, p.kv_type, p.drafter, p.max_draft, p.load) == (4096, "f16", "auto", 16, "mmap")
    assert p.footprint.total > p.minimum


def test_a_budget_too_small_is_refused_naming_the_minimum():
    with pytest.raises(BudgetError, match=r"too small for qwen: plain decoding needs at least 1\.\d\d GB"):
        plan(PlanRequest(QWEN15, 900 * MB, "auto", baseline=BASE, repack=True))
    minimum = plan(PlanRequest(QWEN15, None, "none", baseline=BASE, repack=True)).minimum
    p = plan(PlanRequest(QWEN15, minimum, "auto", baseline=BASE, repack=True))  # the minimum named is enough
    assert p.footprint.total <= minimum and p.kv_type == "q4_0"


@pytest.mark.parametrize("drafter,drafter_model", [("auto", None), ("smollm2", SMOL), ("auto+smollm2", SMOL)])
def test_every_plan_fits_its_budget_and_gives_up_context_only_when_it_must(drafter, drafter_model):
    minimum = plan(PlanRequest(QWEN15, None, "none", baseline=BASE, repack=True)).minimum
    last_ctx = None
    for budget in range(3000 * MB, minimum - 1, -25 * MB):
        p = plan(PlanRequest(QWEN15, budget, drafter, drafter_model, n_ctx=4096, baseline=BASE, repack=True))
        assert p.footprint.total <= budget
        if last_ctx is not None:
            assert p.n_ctx <= last_ctx  # less memory never buys more context
        last_ctx = p.n_ctx
        if p.n_ctx < 4096:
            assert any("context" in n for n in p.notes)


def test_a_drafter_model_that_does_not_fit_falls_back_to_model_free_drafting():
    roomy = plan(PlanRequest(QWEN15, 2000 * MB, "smollm2", SMOL, baseline=BASE, repack=True))
    assert roomy.drafter == "smollm2" and "drafter_weights_resident" in roomy.footprint.components
    tight = plan(PlanRequest(QWEN15, (plain_footprint(QWEN15, 4096, BASE) + 40 * MB) / HEADROOM, "smollm2", SMOL,
                 baseline=BASE, repack=True))
    assert (tight.drafter, tight.n_ctx, tight.kv_type) == ("auto", 4096, "f16")
    assert "drafter auto instead of smollm2" in " ".join(tight.notes)


# Qwen2.5-Coder-0.5B Q4_K_M drafting for the 1.5B, and a VocabTrim'd export of it at K = 16,384
# (its embedding and tied LM head cut to the kept rows; coverage as the export's manifest records it)
QWEN05 = replace(QWEN15, path="qwen05.gguf", n_layer=24, n_head=14, n_embd=896, n_ff=4864, head_k=64, head_v=64,
                 tensor_bytes=397_000_000, file_bytes=398_000_000, repack_bytes=200_000_000)
QWEN05_TRIM = replace(QWEN05, path="qwen05-trim16k/model.gguf", n_vocab=16384, n_tokens=16384,
                      tensor_bytes=280_000_000, file_bytes=281_000_000, vocab_coverage=0.97)
DRAFTERS = {"qwen05": QWEN05, "qwen05-trim16k": QWEN05_TRIM}


def test_among_several_drafters_the_plan_takes_the_fastest_predicted_and_says_why():
    from edgespec.memory.drafter_choice import predicted_speedup

    speed = {d: predicted_speedup(d, 16, QWEN15, f) for d, f in DRAFTERS.items()}
    assert speed["qwen05-trim16k"] > speed["qwen05"]  # 30% fewer bytes per draft token for 3% of acceptance
    for budget in (None, 2500 * MB):
        p = plan(PlanRequest(QWEN15, budget, "qwen05,qwen05-trim16k", DRAFTERS, baseline=BASE, repack=True))
        assert p.drafter == "qwen05-trim16k" and p.drafter_model is QWEN05_TRIM
        assert p.speedup == pytest.approx(speed["qwen05-trim16k"])
        assert (f"drafter qwen05-trim16k chosen among qwen05 {speed['qwen05']:.2f}x, "
                f"qwen05-trim16k {speed['qwen05-trim16k']:.2f}x") in " ".join(p.notes)
    # a trim that keeps too few of the target's tokens loses to the full vocabulary
    poor = {**DRAFTERS, "qwen05-trim16k": replace(QWEN05_TRIM, vocab_coverage=0.6)}
    assert plan(PlanRequest(QWEN15, 2500 * MB, "qwen05,qwen05-trim16k", poor, baseline=BASE, repack=True)).drafter == "qwen05"


def test_a_smaller_drafter_keeps_the_context_a_larger_one_would_give_up():
    budget = 3000 * MB
    while plan(PlanRequest(QWEN15, budget, "qwen05", QWEN05, baseline=BASE, repack=True)).drafter == "qwen05":
        budget -= 10 * MB  # down to where the full drafter no longer fits at the full context: it falls back
    # listed with a poor trim, the trim keeps the full context the full drafter would give up
    poor = {**DRAFTERS, "qwen05-trim16k": replace(QWEN05_TRIM, vocab_coverage=0.6)}
    p = plan(PlanRequest(QWEN15, budget, "qwen05,qwen05-trim16k", poor, baseline=BASE, repack=True))
    assert (p.drafter, p.n_ctx) == ("qwen05-trim16k", 4096) and p.footprint.total <= budget
    assert re.search(r"among qwen05 \d\.\d\dx at context (2048|1024|512), qwen05-trim16k \d\.\d\dx \(", " ".join(p.notes))


def test_one_drafter_named_plans_as_before():
    for budget in (None, 2500 * MB, 1800 * MB):
        one = plan(PlanRequest(QWEN15, budget, "qwen05", QWEN05, baseline=BASE, repack=True))
        mapped = plan(PlanRequest(QWEN15, budget, "qwen05", {"qwen05": QWEN05}, baseline=BASE, repack=True))
        assert one == mapped and not any("chosen" in n for n in one.notes)


def test_a_drafter_added_as_the_docs_say_is_planned_model_free_and_charged_its_own_table_bound(monkeypatch):
    name = register_the_docs_drafter(monkeypatch)
    p = plan(PlanRequest(QWEN15, 3000 * MB, name, n_ctx=4096, baseline=BASE, repack=True))  # no model's facts
    assert p.drafter == name and "drafter_tables" not in p.footprint.components
    monkeypatch.setitem(REGISTRY, name, replace(REGISTRY[name], table_bytes=lambda n_vocab, n_ctx: 1000 * n_ctx))
    p = plan(PlanRequest(QWEN15, 3000 * MB, name, n_ctx=4096, baseline=BASE, repack=True))
    assert p.footprint.components["drafter_tables"] == 1000 * 4096


def test_a_drafter_list_names_each_once_and_falls_back_after_all_of_them():
    from edgespec.memory.drafter_choice import drafter_candidates

    assert drafter_candidates("qwen05, qwen05-trim16k,qwen05") == [("qwen05", 0), ("qwen05-trim16k", 0),
                                                                     ("auto", 1), ("none", 2)]
    assert drafter_candidates("lookup,ngram") == [("lookup", 0), ("ngram", 0), ("none", 2)]
    with pytest.raises(ValueError, match="needs its model's facts"):
        plan(PlanRequest(QWEN15, None, "qwen05,qwen05-trim16k", QWEN05, baseline=BASE, repack=True))


def test_plain_plus_ten_percent_keeps_speculation_and_full_draft_length():
    budget = int(plain_footprint(QWEN15, 4096, BASE) * 1.10)
    p = plan(PlanRequest(QWEN15, budget, "auto", n_ctx=4096, max_draft=16, baseline=BASE, repack=True))
    assert (p.drafter, p.max_draft, p.n_ctx, p.kv_type) == ("auto", 16, 4096, "f16")


def test_a_tight_budget_shortens_the_draft_rather_than_dropping_it():
    plain = plan(PlanRequest(QWEN15, None, "none", n_ctx=4096, baseline=BASE, repack=True))
    free = predict(QWEN15, ModelConfig(n_ctx=4096, n_batch=64, load="read", prefill=4096, max_outputs=1),
                   "auto", baseline=BASE, repack=True).total
    p = plan(PlanRequest(QWEN15, (free + 3 * 2 * 151936 * 4) / HEADROOM, "auto", n_ctx=4096, max_draft=16, baseline=BASE,
             repack=True))
    assert p.drafter == "auto" and 1 <= p.max_draft < 16 and p.n_ctx == 4096
    assert plain.minimum < p.footprint.total


def test_memory_sizes_parse_like_people_write_them():
    assert parse_bytes("900MB") == 900 * MB
    assert parse_bytes("1.5GB") == 1_500_000_000
    assert parse_bytes("1GiB") == 2**30
    assert parse_bytes("800 m") == 800 * MB
    for bad in ("lots", "-1GB", "0"):
        with pytest.raises(ValueError):
            parse_bytes(bad)


def test_gpu_offload_takes_every_layer_that_fits_in_the_gpus_free_memory():
    from edgespec.runtimes.gpu.devices import gpu_layers

    assert gpu_layers(QWEN15, 4 << 30, n_ctx=4096) == QWEN15.n_layer + 1  # 1.1 GB of weights in 4 GiB: all
    part = gpu_layers(QWEN15, 1 << 30, n_ctx=4096)  # 1 GiB: the output layer and most blocks, not all
    assert 1 < part <= QWEN15.n_layer
    assert gpu_layers(QWEN15, 1 << 30, n_ctx=32768) < part  # a longer context leaves room for fewer
    assert gpu_layers(QWEN15, 200 << 20, n_ctx=4096) == 0  # less than the reserve: nothing


# Qwen2.5-Coder-1.5B's LM head (Q6_K) and input embedding (Q4_K), as from_gguf reads them
QWEN15_GPU = replace(QWEN15, embd_bytes=131_270_000, output_bytes=191_440_000)


def test_a_budgeted_plan_reserves_logits_for_its_longest_verification_only():
    p = plan(PlanRequest(QWEN15, 2500 * MB, "lookup", n_ctx=4096, max_draft=8, baseline=BASE, repack=True))
    assert p.n_outputs_max == p.max_draft + 1 == 9
    assert p.backend_options()["n_outputs_max"] == 9  # llama.cpp would reserve n_batch rows otherwise
    assert "n_gpu_layers" not in p.backend_options()  # a CPU plan says nothing about GPUs


def test_offloaded_buffers_count_in_the_total_on_a_gpu_that_shares_ram():
    cfg = ModelConfig(n_ctx=4096, load="read", n_batch=512, n_outputs_max=17, max_outputs=17,
                      gpu_layers=QWEN15_GPU.n_layer + 1)
    parts = model_bytes(QWEN15_GPU, cfg, repack=True)
    # the embedding stays on the host; the blocks and the LM head move; the KV cache moves with its layers
    assert parts["weights_resident"] == QWEN15_GPU.embd_bytes
    assert parts["gpu_weights"] == QWEN15_GPU.tensor_bytes - QWEN15_GPU.embd_bytes
    assert parts["kv_cache"] == 0 and parts["gpu_kv_cache"] == model_bytes(QWEN15_GPU, ModelConfig(n_ctx=4096))["kv_cache"]
    # the GPU's compute buffer holds the logits of n_outputs_max rows, not of the whole micro-batch
    default = model_bytes(QWEN15_GPU, replace(cfg, n_outputs_max=0), repack=True)["gpu_compute"]
    assert default == 512 * 151936 * 4 and parts["gpu_compute"] < default / 3  # then a layer's activations lead
    shared = predict(QWEN15_GPU, cfg, baseline=BASE)
    assert shared.components["gpu_weights"] and not shared.device
    discrete = predict(QWEN15_GPU, cfg, baseline=BASE, gpu_shares_ram=False)
    assert discrete.device["gpu_weights"] == parts["gpu_weights"]
    assert discrete.total < shared.total - parts["gpu_weights"]  # a discrete GPU's memory is not the process's


def test_llama_cpp_offloads_the_output_layer_first_then_the_last_blocks():
    host = model_bytes(QWEN15_GPU, ModelConfig(n_ctx=4096, load="read"), repack=True)
    head_only = model_bytes(QWEN15_GPU, ModelConfig(n_ctx=4096, load="read", gpu_layers=1), repack=True)
    assert head_only["gpu_weights"] == QWEN15_GPU.output_bytes and head_only["gpu_kv_cache"] == 0
    assert head_only["weights_resident"] == host["weights_resident"] - QWEN15_GPU.output_bytes
    half = model_bytes(QWEN15_GPU, ModelConfig(n_ctx=4096, load="read", gpu_layers=15), repack=True)
    assert half["gpu_kv_cache"] == host["kv_cache"] * 14 // 28 == half["kv_cache"]  # the head and 14 of 28 blocks


def test_a_measured_gpu_driver_counts_whether_or_not_layers_are_offloaded():
    """llama.cpp sends large batches to the GPU even with no layer offloaded, so a GPU
    process holds the driver's memory either way; the planner plans from the measured figure."""
    cpu_side = predict(QWEN15_GPU, ModelConfig(n_ctx=4096, load="read"), gpu_driver=150 * MB)
    assert cpu_side.components["gpu_driver"] == 150 * MB
    assert "gpu_driver" not in predict(QWEN15_GPU, ModelConfig(n_ctx=4096, load="read")).components
    gpu = GpuMemory(8 << 30, shares_ram=True, driver=150 * MB)
    p = plan(PlanRequest(QWEN15_GPU, 2500 * MB, "lookup", n_ctx=4096, baseline=BASE, repack=True, gpu=gpu))
    assert p.footprint.components["gpu_driver"] == 150 * MB and p.footprint.total <= 2500 * MB * HEADROOM
    assert p.kv_type == "f16"  # a quantized cache's flash-attention pipelines are not in the measurement
    bigger = plan(PlanRequest(QWEN15_GPU, None, "lookup", n_ctx=4096, baseline=BASE, repack=True, gpu=replace(gpu, driver=600 * MB)))
    assert bigger.minimum - p.minimum == pytest.approx(450 * MB / HEADROOM, abs=2)  # the minimum includes it


def test_a_gpu_plan_offloads_what_its_memory_holds_and_says_so_when_not_all():
    roomy = plan(PlanRequest(QWEN15_GPU, None, "lookup", n_ctx=4096, gpu=GpuMemory(8 << 30, shares_ram=True)))
    assert roomy.n_gpu_layers == QWEN15_GPU.n_layer + 1
    assert roomy.footprint.components["gpu_weights"] > 0
    small = GpuMemory(1 << 30, shares_ram=False, name="a 1 GiB GPU")
    p = plan(PlanRequest(QWEN15_GPU, 3000 * MB, "lookup", n_ctx=4096, baseline=BASE, repack=True, gpu=small))
    assert 0 < p.n_gpu_layers <= QWEN15_GPU.n_layer
    assert sum(p.footprint.device.values()) <= small.allowance
    assert any("layers on a 1 GiB GPU" in n for n in p.notes)
    assert p.backend_options()["n_gpu_layers"] == p.n_gpu_layers


def test_a_device_profile_is_planned_with_its_gpu_memory_and_priced_by_its_roofline():
    """`bench --device-profile` plans each method for the device: a phone's GPU shares its
    RAM, so the whole model goes there within the app's share, and verifying a draft costs
    about one token there, so speculation is predicted to pay more than on this CPU."""
    from edgespec.memory.planner import plan_for_profile
    from edgespec.runtimes.gpu.profiles import PROFILES

    phone = PROFILES["adreno-750"]
    p = plan_for_profile(QWEN15_GPU, phone, drafter="lookup", baseline=BASE)
    assert p.budget == phone.memory_bytes and p.footprint.total <= phone.memory_bytes * HEADROOM
    assert p.n_gpu_layers == QWEN15_GPU.n_layer + 1 and p.footprint.components["gpu_weights"] > 0
    assert p.notes[0].startswith("PROJECTED for adreno-750") and "not measured" in p.notes[0]
    here = plan(PlanRequest(QWEN15_GPU, phone.memory_bytes, "lookup", baseline=BASE))  # the CPU's default verification slope
    assert p.speedup > here.speedup > 1
    # a smaller share of the phone's memory: a shorter context, the model still all on the GPU
    tight = plan_for_profile(QWEN15_GPU, phone, budget=1500 * MB, drafter="lookup", baseline=BASE)
    assert tight.footprint.total <= 1500 * MB * HEADROOM
    assert tight.n_ctx < p.n_ctx and tight.drafter == "lookup" and tight.n_gpu_layers == p.n_gpu_layers
    with pytest.raises(BudgetError, match="^adreno-750: a memory budget of 900 MB is too small"):
        plan_for_profile(QWEN15_GPU, phone, budget=900 * MB, baseline=BASE)


def test_batch_sizes_not_timed_are_priced_as_decoding_tries_them():
    from edgespec.memory.drafter_choice import verification_units
    from edgespec.speculative.cost_curve import OPTIMISTIC_ROW

    # nothing timed on this machine yet: every further row at the price the controller tries an untimed size at
    assert verification_units(None, 3) == pytest.approx([1.0, 1.0, 1 + OPTIMISTIC_ROW, 1 + 2 * OPTIMISTIC_ROW,
                                                         1 + 3 * OPTIMISTIC_ROW])
    # one token and two timed (2 cost 1.2 of one): those as timed, 3 and 4 tokens counted up from 2
    timed = verification_units({1: 0.030, 2: 0.036}, 3)
    assert timed == pytest.approx([1.0, 1.0, 1.2, 1.2 + OPTIMISTIC_ROW, 1.2 + 2 * OPTIMISTIC_ROW])


def test_measured_drafter_steps_replace_the_weight_size_prior():
    from edgespec.memory.drafter_choice import predicted_speedup, verification_units

    # an earlier VocabTrim run (a busier machine than the README's table): the trimmed step 21% cheaper (its weights say 30%), and a
    # 2-token verification 1.8x one token (4 tokens 2.8x, the low end measured; +0.5 a token after): no 0.5B
    # draft pays on that CPU, and the plan says so
    cpu = {1: 1.0, 2: 1.8, 3: 2.3, 4: 2.8, 5: 3.3} | {5 + n: 3.3 + 0.5 * n for n in range(1, 13)}
    measured = {"qwen05": 0.39, "qwen05-trim16k": 0.31}  # 52.8 and 41.6 ms against 135 ms (7.41 tok/s)
    assert all(predicted_speedup(d, 16, QWEN15, f, verification_units(cpu, 16), measured[d]) == 1.0
               for d, f in DRAFTERS.items())
    p = plan(PlanRequest(QWEN15, 2500 * MB, "qwen05,qwen05-trim16k", DRAFTERS, baseline=BASE, repack=True, batch_costs=cpu,
             draft_costs=measured))
    assert "verification costs measured on this machine; drafter steps measured" in " ".join(p.notes)
    assert f"no draft of {p.drafter} is predicted to pay" in " ".join(p.notes)
    # where verification is nearly free (a GPU), the measured steps decide
    gpu = {n: 1.0 + 0.05 * (n - 1) for n in range(1, 18)}
    units = verification_units(gpu, 16)
    speed = {d: predicted_speedup(d, 16, QWEN15, f, units, measured[d]) for d, f in DRAFTERS.items()}
    assert speed["qwen05-trim16k"] < predicted_speedup("qwen05-trim16k", 16, QWEN15, QWEN05_TRIM, units)  # dearer
    p = plan(PlanRequest(QWEN15, 2500 * MB, "qwen05,qwen05-trim16k", DRAFTERS, baseline=BASE, repack=True, batch_costs=gpu,
             draft_costs=measured))
    assert p.drafter == max(speed, key=speed.get) and p.speedup == pytest.approx(max(speed.values()))
    # priced equally, the full vocabulary wins: it is accepted more often
    same = {"qwen05": 0.35, "qwen05-trim16k": 0.35}
    assert plan(PlanRequest(QWEN15, 2500 * MB, "qwen05,qwen05-trim16k", DRAFTERS, baseline=BASE, repack=True, batch_costs=gpu,
                draft_costs=same)).drafter == "qwen05"


def test_a_drafters_step_is_kept_per_machine_and_found_by_model_file(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from edgespec.memory.make_plan import measured_costs
    from edgespec.speculative import calibration

    monkeypatch.setattr(calibration, "_dir", lambda: tmp_path / "calibration")
    target, drafter = tmp_path / "target.gguf", tmp_path / "drafter.gguf"
    target.write_bytes(b"t" * 10)
    drafter.write_bytes(b"d" * 5)
    assert measured_costs(target, {"small": drafter}) == (None, {})  # nothing measured yet: priors

    def key(path, threads):  # as LlamaCppBackend.cost_key lays it out
        import platform
        return f"{calibration.model_prefix(path)}{threads}|512|False|f16|read|0.3.36|AVX2 = 1|cpu|{platform.node()}|CPU|0"

    cost = calibration.CostModel(max_n=5)
    cost.set_timed({1: 0.100, 2: 0.180, 4: 0.280})
    calibration.save(key(target, 2), cost)
    small = SimpleNamespace(backend=SimpleNamespace(cost_key=lambda: key(drafter, 2)))
    calibration.save_drafter_steps([(small, (3, 0.03))])  # too few steps to trust
    assert measured_costs(target, {"small": drafter})[1] == {}
    calibration.save_drafter_steps([(small, (40, 40 * 0.044))])
    batch, steps = measured_costs(target, {"small": drafter})
    assert batch == pytest.approx({1: 0.100, 2: 0.180, 4: 0.280})  # as timed: the planner prices the sizes between
    assert steps == {"small": pytest.approx(0.44)}


def test_a_pairs_measured_acceptance_replaces_the_prior(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from edgespec.memory.make_plan import measured_acceptance
    from edgespec.memory.drafter_choice import predicted_speedup, verification_units
    from edgespec.speculative import calibration

    monkeypatch.setattr(calibration, "_dir", lambda: tmp_path / "calibration")
    target, full, trimmed = (tmp_path / f"{n}.gguf" for n in ("target", "full", "trimmed"))
    for f in (target, full, trimmed):
        f.write_bytes(b"x")
    drafters = {"qwen05": full, "qwen05-trim16k": trimmed}
    assert measured_acceptance(target, drafters) == {}  # nothing kept yet: the priors decide
    generations = [(full, "model", [60, 53]), (trimmed, "model", [64, 42]), (trimmed, "model", [40, 26]),
                   (trimmed, "model", [10, 2])]  # the last drafted too little to count
    for path, key, counts in generations:
        calibration.save_acceptance(target, [SimpleNamespace(kind=Kind(key), backend=SimpleNamespace(path=path))],
                                    {key: counts, "ngram": [99, 0]})
    found = measured_acceptance(target, drafters)
    assert found == {"qwen05": pytest.approx(53 / 60), "qwen05-trim16k": pytest.approx(68 / 104)}
    assert measured_acceptance(full, {"x": trimmed}) == {}  # kept per pair: another target knows nothing
    # accepted less often than its coverage prior says (as the first GGUF trims were), the
    # trimmed drafter no longer wins where verification is nearly free
    gpu = {n: 1.0 + 0.05 * (n - 1) for n in range(1, 18)}
    steps = {"qwen05": 0.39, "qwen05-trim16k": 0.31}
    units = verification_units(gpu, 16)
    prior = predicted_speedup("qwen05-trim16k", 16, QWEN15, QWEN05_TRIM, units, steps["qwen05-trim16k"])
    assert predicted_speedup("qwen05-trim16k", 16, QWEN15, QWEN05_TRIM, units, steps["qwen05-trim16k"],
                             found["qwen05-trim16k"]) < prior
    choose = "qwen05,qwen05-trim16k"
    assert plan(PlanRequest(QWEN15, 2500 * MB, choose, DRAFTERS, baseline=BASE, repack=True, batch_costs=gpu,
                draft_costs=steps)).drafter == "qwen05-trim16k"  # on priors
    p = plan(PlanRequest(QWEN15, 2500 * MB, choose, DRAFTERS, baseline=BASE, repack=True, batch_costs=gpu, draft_costs=steps,
             draft_accept=found))
    assert p.drafter == "qwen05" and "drafter steps measured; acceptance measured" in " ".join(p.notes)
    # the count follows the files: past the window the older half goes
    calibration.save_acceptance(target, [SimpleNamespace(kind=Kind("model"), backend=SimpleNamespace(path=full))],
                                {"model": [calibration.ACCEPT_WINDOW, 0]})
    n, a = calibration.acceptance(target, full)
    assert n == (60 + calibration.ACCEPT_WINDOW) // 2 and a == 53 // 2  # the rate a blend of old and new


@pytest.mark.slow
def test_a_drafter_that_fits_only_trimmed_is_planned_trimmed_with_the_most_tokens_that_fit():
    from edgespec.memory.drafter_choice import TRIM_KS, trim_candidates

    q05 = replace(QWEN05, embd_bytes=111_000_000)  # its tied embedding and LM head, Q6_K
    trims = trim_candidates(QWEN15, {"qwen05": q05, "smollm2": SMOL})  # SmolLM2's vocabulary is another
    assert list(trims) == [f"qwen05@trim{k}" for k in TRIM_KS]
    t = trims["qwen05@trim16384"]  # rows sliced, each as many bytes as before
    assert t.n_vocab == 16384 and t.embd_bytes == round(111_000_000 * 16384 / 151936)
    assert q05.tensor_bytes - t.tensor_bytes == q05.embd_bytes - t.embd_bytes
    # without a budget, or where the drafter fits as it is, nothing is trimmed
    assert plan(PlanRequest(QWEN15, None, "qwen05", q05, baseline=BASE, repack=True, trims=trims)).drafter == "qwen05"
    assert plan(PlanRequest(QWEN15, 3000 * MB, "qwen05", q05, baseline=BASE, repack=True, trims=trims)).drafter == "qwen05"
    budget, chosen = 3000 * MB, []
    while not chosen or chosen[-1] != "auto":
        budget -= 2 * MB
        p = plan(PlanRequest(QWEN15, budget, "qwen05", q05, baseline=BASE, repack=True, trims=trims))
        assert p.footprint.total <= budget and p.n_ctx == 4096
        if p.drafter != "qwen05" and (not chosen or chosen[-1] != p.drafter):
            chosen.append(p.drafter)
            assert f"drafter {p.drafter} instead of qwen05: qwen05 does not fit" in p.notes
    # as the budget shrinks: the most tokens that fit, fewer, then model-free drafting
    assert chosen == [f"qwen05@trim{k}" for k in TRIM_KS] + ["auto"]


def test_trims_no_plan_can_find_again_are_removed_when_a_new_one_is_built(tmp_path):
    import json

    from edgespec.export.gguf_trim import drop_stale_trims

    source, other = tmp_path / "qwen05.gguf", tmp_path / "smollm2.gguf"
    source.write_bytes(b"x")
    other.write_bytes(b"y")

    def trim(name: str, src):
        folder = tmp_path / "trimmed" / name
        folder.mkdir(parents=True)
        (folder / "manifest.json").write_text(json.dumps({"source": str(src)}))
        return folder

    new = trim("qwen05-aaaa-trim16384", source)
    other_k = trim("qwen05-aaaa-trim32768", source)  # another budget's trim of the same file: kept
    before_download = trim("qwen05-bbbb-trim16384", source)  # the file has changed since: its key never matches
    gone = trim("gone-cccc-trim8192", tmp_path / "deleted.gguf")  # its source was deleted
    unrelated = trim("smollm2-dddd-trim8192", other)
    building = tmp_path / "trimmed" / ".qwen05-eeee-trim8192.partial-1"  # a trim being written: left alone
    building.mkdir()
    dropped = drop_stale_trims(tmp_path / "trimmed", keep=new)
    assert sorted(dropped) == sorted([before_download, gone])
    assert all(f.is_dir() for f in (new, other_k, unrelated, building))
    assert not before_download.exists() and not gone.exists()
