"""llama.cpp on a GPU through Vulkan, for real: in CI on Mesa's lavapipe, a software
Vulkan device that `./install.sh --dev` installs, with llama.cpp built with its Vulkan
backend. Each test starts a fresh process: llama.cpp sets its devices up once per process,
and the rest of the suite has long since chosen the CPU.

Without a Vulkan build or device these tests skip, except under CI (CI=true), where a
missing GPU path is a failure, not a skip."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import edgespec

HERE = Path(__file__).parent


def _gpu_path() -> str | None:
    """Why the GPU path cannot run here, or None."""
    from edgespec.runtimes.gpu.devices import llama_has_vulkan, vulkan_devices

    if not llama_has_vulkan():
        return "llama.cpp was built without Vulkan"
    if not vulkan_devices():
        return "no Vulkan device (Debian: apt-get install mesa-vulkan-drivers)"
    return None


@pytest.fixture(scope="module")
def vulkan():
    why = _gpu_path()
    if why and os.environ.get("CI"):
        pytest.fail(f"CI must run the GPU path: {why}")
    if why:
        pytest.skip(why)


pytestmark = pytest.mark.real_model


def test_generate_on_the_gpu_runs_on_vulkan_and_says_which_device(vulkan, smollm2_path):
    r = edgespec("generate", "def add(a, b):", "-m", str(smollm2_path), "-d", "lookup", "-n", "12", "--device", "gpu",
                 "--json")
    assert r.returncode == 0, r.stderr
    assert "device: Vulkan0" in r.stderr
    out = json.loads(r.stdout)
    assert len(out["token_ids"]) == 12 and out["text"].strip()


def test_chat_on_the_gpu(vulkan, smollm2_path):
    r = edgespec("chat", "-m", str(smollm2_path), "-n", "8", "--device", "gpu", "--plain",
                 stdin="Say hello.\n/quit\n")
    assert r.returncode == 0, r.stderr
    assert "device: Vulkan0" in r.stderr and r.stdout.strip()


def test_without_a_gpu_device_the_request_falls_back_to_the_cpu_with_one_notice(smollm2_path):
    """The Vulkan loader pointed at no driver: as on a machine without a GPU (or, with a
    CPU-only build of llama.cpp, the notice says that instead)."""
    env = {**os.environ, "VK_DRIVER_FILES": os.devnull, "VK_ICD_FILENAMES": os.devnull}
    env.pop("GGML_VK_VISIBLE_DEVICES", None)
    r = subprocess.run([sys.executable, "-m", "edgespec", "generate", "Hello", "-m", str(smollm2_path), "-d", "none",
                        "-n", "4", "--device", "gpu"], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    notices = [ln for ln in r.stderr.splitlines() if ln.startswith("notice:")]
    assert len(notices) == 1 and "no GPU:" in notices[0] and "running on the CPU" in notices[0], r.stderr
    assert "device: CPU" in r.stderr and r.stdout.strip()


def test_speculation_on_vulkan_is_lossless_against_plain_decoding_on_vulkan(vulkan):
    """The losslessness test of test_real_lossless.py, on the GPU: every proposal verified
    (batches of up to 9 tokens on Vulkan), against plain greedy decoding on Vulkan; a
    divergence must be a re-scored near-tie. Lavapipe decodes SmolLM2 at about 2 tokens/s,
    so 4 prompts of 32 tokens."""
    env = {**os.environ, "EDGESPEC_LOSSLESS_DEVICE": "gpu", "EDGESPEC_LOSSLESS_PROMPTS": "4",
           "EDGESPEC_LOSSLESS_TOKENS": "32"}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                        str(HERE / "test_real_lossless.py"), "-k", "llama.cpp and auto"],
                       capture_output=True, text=True, env=env, timeout=1800, cwd=HERE.parent)
    report = [ln for ln in r.stdout.splitlines() if "identical to plain greedy" in ln]
    print("\n".join(report))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "1 passed" in r.stdout
    assert len(report) == 1 and "on Vulkan0" in report[0], report


def test_a_memory_budget_on_the_gpu_offloads_every_layer_and_the_peak_stays_under_it(vulkan, smollm2_path, tmp_path):
    """A GPU budget is planned from the driver's memory as measured on this machine (once, in
    a child process: shader pipelines for every verification width, compiled with Mesa's
    shader cache off); the plan offloads every layer, and the profile's peak RSS stays under
    the budget and the prediction. The profile runs with the shader cache off too, like for
    like: a warm cache holds less (docs/gpu.md), so against a warm run the prediction is that
    much high, safely. Drafts of at most 4 tokens keep the widths lavapipe compiles, twice with
    the cache off (the child, then the profile), to 5."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"category": "code", "messages": [
        {"role": "user", "content": "Write a Python function that adds two numbers."}]}) + "\n")
    r = edgespec("profile", str(smollm2_path), "--device", "gpu", "-d", "lookup", "--max-draft", "4", "--ctx", "1024",
                 "-n", "8", "--prompts", str(prompts), "-b", "750MB", "--json", str(tmp_path / "p.json"), timeout=1500,
                 env={**os.environ, "MESA_SHADER_CACHE_DISABLE": "true"})
    assert r.returncode == 0, r.stderr
    out = json.loads((tmp_path / "p.json").read_text())["rows"][0]  # a record of one run
    assert out["plan"]["n_gpu_layers"] == 31 and out["predicted_components"]["gpu_driver"] > 0
    assert out["within_budget"] and out["peak_rss"] <= 750_000_000
    assert -0.10 <= out["error"] <= 0.35, out["error"]  # (predicted - peak) / peak
