"""Choosing a device: ONNX Runtime's execution providers with their options, llama.cpp's
GPUs with a fallback notice, and the device profiles' projected costs. The GPU tests
that run llama.cpp on Vulkan are in test_vulkan.py."""

import pytest

from edgespec.errors import EdgespecError
from edgespec.runtimes.gpu.devices import onnx_providers, parse_ep_options
from edgespec.runtimes.gpu.profiles import PROFILES, ModelShape, RooflineCost

PHONE = ["QNNExecutionProvider", "NnapiExecutionProvider", "XnnpackExecutionProvider", "CPUExecutionProvider"]
MAC = ["CoreMLExecutionProvider", "CPUExecutionProvider"]
PLAIN = ["AzureExecutionProvider", "CPUExecutionProvider"]  # the PyPI wheel on Linux


def test_an_npu_request_takes_qnn_with_its_backend_path_and_keeps_the_cpu_for_the_rest():
    placed = onnx_providers("npu", PHONE, {"backend_path": "libQnnHtp.so"})
    assert placed.providers == [("QNNExecutionProvider", {"backend_path": "libQnnHtp.so"}), "CPUExecutionProvider"]
    assert placed.notice is None


def test_nnapi_flags_and_coreml_compute_units_are_passed_through():
    nnapi = onnx_providers("gpu", PHONE, parse_ep_options(["NNAPI_FLAG_USE_FP16=1", "NNAPI_FLAG_CPU_DISABLED=1"]))
    assert nnapi.providers[0] == ("NnapiExecutionProvider", {"NNAPI_FLAG_USE_FP16": "1", "NNAPI_FLAG_CPU_DISABLED": "1"})
    coreml = onnx_providers("auto", MAC, {"MLComputeUnits": "CPUAndNeuralEngine"})
    assert coreml.providers[0] == ("CoreMLExecutionProvider", {"MLComputeUnits": "CPUAndNeuralEngine"})


def test_xnnpack_runs_cpu_requests_with_the_thread_count():
    placed = onnx_providers("cpu", PHONE, threads=4)
    assert placed.providers == [("XnnpackExecutionProvider", {"intra_op_num_threads": "4"}), "CPUExecutionProvider"]


def test_a_missing_provider_falls_back_to_the_cpu_with_a_notice_and_drops_its_options():
    placed = onnx_providers("npu", PLAIN, {"backend_path": "libQnnHtp.so"})
    assert placed.providers == ["CPUExecutionProvider"]
    assert "no NPU execution provider" in placed.notice and "without the --ep-option settings" in placed.notice


def test_bad_device_and_option_text_are_refused():
    with pytest.raises(EdgespecError, match="unknown device 'tpu'"):
        onnx_providers("tpu", PLAIN)
    with pytest.raises(EdgespecError, match="KEY=VALUE"):
        parse_ep_options(["MLComputeUnits"])


def test_an_onnx_model_asked_onto_a_missing_npu_runs_on_the_cpu_and_says_so(tmp_path):
    """The real ONNX Runtime on this machine: only its CPU provider exists."""
    pytest.importorskip("optimum.exporters.onnx", reason="export extras not installed")
    from edgespec.export.pipeline import ExportPlan, run_export
    from edgespec.runtimes import open_backend
    from tiny_hf import build

    src = build(tmp_path / "hf")
    run_export(ExportPlan(str(src), "onnx", tmp_path / "onnx", "fp32", validate=False), quiet=True)
    with open_backend(tmp_path / "onnx", n_ctx=64, device="npu", ep_options={"backend_path": "libQnnHtp.so"}) as b:
        assert b.providers == ["CPUExecutionProvider"] and b.device == "CPU"
        assert b.notice.startswith("no NPU execution provider in this onnxruntime")
        assert b.eval([1, 2, 3]).shape[0] == 3


def shape_of_qwen_1_5b_q4() -> ModelShape:
    # Qwen2.5-Coder-1.5B: 28 layers, d 1536, 12 query heads and 2 KV heads of 128, ffn 8960
    return ModelShape(weight_bytes=986_000_000, n_layer=28, n_embd=1536, q_dim=1536, kv_dim=256, n_ff=8960,
                      n_vocab=151_936)


def test_on_a_phone_gpu_verifying_a_few_tokens_costs_about_one_token():
    """Decode is bandwidth-bound: the weights are read once per call whatever k is,
    until the arithmetic of k tokens takes longer than the reading."""
    cost = RooflineCost(PROFILES["adreno-750"], shape_of_qwen_1_5b_q4())
    one = cost.eval_cost(1, 256)
    assert one.bound == "bandwidth"
    assert cost.eval_cost(4, 256).seconds / one.seconds < 1.05
    assert cost.eval_cost(64, 256).bound == "compute"
    tps = cost.decode_tokens_per_s(256)
    assert 20 < tps < 60  # 986 MB at half of 76.8 GB/s, plus 2.8 ms of dispatch: about 35 tokens/s


def test_every_profile_names_its_source():
    for p in PROFILES.values():
        assert p.bandwidth > 0 and p.fp16_flops > 0 and p.memory_bytes > 0 and "GB/s" in p.source


@pytest.mark.real_model
def test_bench_projects_phone_gpus_from_acceptance_measured_here_and_says_so(smollm2_path, tmp_path):
    from helpers import edgespec

    out = tmp_path / "proj.json"
    r = edgespec("bench", "-m", str(smollm2_path), "--device-profile", "adreno-750,apple-m3", "--drafters", "lookup",
                 "-n", "24", "--limit", "1", "--json", str(out))
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("PROJECTION for") == 2 and "not measured" in r.stdout and "assumed:" in r.stdout
    rows = __import__("json").loads(out.read_text())["rows"]
    mine = {(x["device_profile"], x["category"], x["method"]): x for x in rows}
    plain, lookup = mine[("adreno-750", "all", "plain")], mine[("adreno-750", "all", "lookup")]
    assert plain["projected_speedup"] == 1.0 and plain["projected_tokens_per_s"] > 0
    assert lookup["drafted"] > 0 and lookup["acceptance"] is not None  # acceptance measured on SmolLM2 here
    assert lookup["verify_cost_curve"]["4"] < 1.1  # bandwidth-bound: 4 tokens cost about one
    # each method ran as the planner planned it for the phone: every layer on its GPU, within its memory
    assert lookup["plan"]["n_gpu_layers"] == 31 and lookup["plan"]["budget"] == PROFILES["adreno-750"].memory_bytes
    assert lookup["plan"]["predicted"]["total"] < lookup["plan"]["budget"] and "PROJECTED" in lookup["plan"]["notes"][0]
    assert "planned for" in r.stdout and "PREDICTED memory" in r.stdout


@pytest.mark.real_model
def test_a_device_profile_plans_within_the_budget_given_and_refuses_one_too_small(smollm2_path):
    from helpers import assert_one_line_error, edgespec

    assert_one_line_error(edgespec("bench", "-m", str(smollm2_path), "--device-profile", "mali-g720", "-b", "100MB"),
                          "mali-g720: a memory budget of 100 MB is too small")
    assert_one_line_error(edgespec("bench", "-m", str(smollm2_path), "-b", "1GB"), "--device-profile only")


def test_an_unknown_profile_is_one_line(smollm2_path):
    from helpers import assert_one_line_error, edgespec

    assert_one_line_error(edgespec("bench", "-m", str(smollm2_path), "--device-profile", "adreno-999"),
                          "unknown device profile 'adreno-999'")


def test_doctor_lists_backends_devices_providers_and_where_each_device_request_runs():
    from helpers import edgespec

    r = edgespec("doctor", "--json")
    assert r.returncode == 0, r.stderr
    report = __import__("json").loads(r.stdout)
    assert "cpu" in report["llama_cpp"]["backends"] and "CPU" in [d["name"] for d in report["llama_cpp"]["devices"]]
    assert "CPUExecutionProvider" in report["onnxruntime"]["providers"]
    assert set(report["device_choice"]) == {"cpu", "gpu", "npu", "auto"}
    assert report["device_choice"]["cpu"]["llama_cpp"] == "CPU"
    gpu = report["device_choice"]["gpu"]
    if "vulkan" in report["llama_cpp"]["backends"] and report["vulkan_devices"]:
        assert gpu["llama_cpp"].startswith("Vulkan0")  # lavapipe, in CI
    else:
        assert gpu["llama_cpp"] == "CPU" and gpu["llama_cpp_notice"].startswith("no GPU:")


def test_a_drafter_model_that_misses_its_device_gets_its_own_notice(tmp_path):
    """The target (GGUF, llama.cpp) and its drafter (ONNX, same vocabulary) both asked onto
    an NPU: neither has one here, and each says so in its own words, once."""
    pytest.importorskip("optimum.exporters.onnx", reason="export extras not installed")
    from edgespec.api import EdgeSpec
    from edgespec.export.pipeline import ExportPlan, run_export
    from tiny_hf import build

    src = build(tmp_path / "hf")
    run_export(ExportPlan(str(src), "gguf", tmp_path / "gguf", "f16", validate=False), quiet=True)
    run_export(ExportPlan(str(src), "onnx", tmp_path / "onnx", "fp32", validate=False), quiet=True)
    with EdgeSpec(str(tmp_path / "gguf"), drafter=str(tmp_path / "onnx"), n_ctx=128, device="npu") as llm:
        target, drafter = llm.notices
        assert target.startswith("no NPU backend in llama.cpp")
        assert drafter.startswith("drafter: no NPU execution provider in this onnxruntime")
        assert llm.generate("def add(a, b):", max_tokens=8).token_ids
