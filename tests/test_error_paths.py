"""Every error path a user can meet, and the test that checks its message and its
exit code (CLI) or HTTP status (server). The list is checked too: each entry must
name a test that exists, so the audit cannot rot silently. Paths that had no such
test before the audit are tested here."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from helpers import assert_one_line_error, edgespec

HERE = Path(__file__).parent

# error path (issue) -> test that checks message + exit code / status
AUDIT = {
    "missing model file": "test_cli.py::test_missing_model_file",
    "unknown model name": "test_cli.py::test_unknown_model_name",
    "corrupt GGUF": "test_cli.py::test_corrupt_gguf",
    "truncated GGUF": "test_store.py::test_a_truncated_gguf_is_detected_and_never_loaded",
    "prompt longer than the context, CLI": "test_cli.py::test_prompt_longer_than_the_context",
    "prompt longer than the context, chat goes on": "test_error_paths.py::test_a_chat_message_too_long_for_the_context_is_refused_and_the_chat_goes_on",
    "unknown drafter": "test_cli.py::test_unknown_drafter",
    "unsupported architecture, missing tokenizer, wrong quant, missing or unwritable output":
        "test_export.py::test_bad_export_input_gives_one_line_errors",
    "trim K larger than the vocabulary": "test_export.py::test_trim_larger_than_the_vocabulary_is_refused",
    "drafter vocabulary that cannot be mapped":
        "test_error_paths.py::test_a_drafter_whose_vocabulary_cannot_be_mapped_is_one_clear_line",
    "memory budget too small, or not a size": "test_memory_budget.py::test_a_budget_below_the_minimum_is_one_clear_line",
    "bad requests: malformed JSON, unknown model, too-long prompt, negative max_tokens, wrong types":
        "test_server.py::test_bad_requests_get_a_4xx_json_error",
    "unknown route or method": "test_server.py::test_unknown_routes_and_methods_get_json_errors_too",
    "model path outside the store without --allow-path":
        "test_server.py::test_serving_a_file_outside_the_store_needs_allow_path",
    "full queue": "test_server.py::test_a_full_queue_answers_503_not_a_hang",
    "missing or wrong API key": "test_server.py::test_api_key_and_closed_cors",
    "unwritable model cache": "test_error_paths.py::test_an_unwritable_model_cache_is_one_clear_line",
    "export --force onto a folder that is not an export, or onto the source":
        "test_export.py::test_force_replaces_only_an_earlier_export_never_a_folder_of_ones_own",
    "DNS rebinding: foreign Host, text/plain body":
        "test_server_hostile.py::test_a_dns_rebinding_page_is_refused_without_a_key",
    "fuzzed request bodies": "test_server_hostile.py::test_no_fuzzed_request_is_a_server_error",
    "chat template that loops for minutes":
        "test_server_hostile.py::test_a_template_that_loops_for_minutes_is_a_400_within_its_budget",
    "serving a model that does not exist": "test_error_paths.py::test_serving_a_missing_model_is_one_clear_line",
    "hostile GGUF that aborts llama.cpp or starves the validator":
        "test_hostile_gguf.py::test_each_crafted_file_is_refused_with_its_one_line",
    "crafted GGUF through the API, serve and chat":
        "test_hostile_gguf.py::test_the_api_and_the_server_refuse_a_crafted_file_in_one_line",
    "crafted GGUF no rule knows": "test_hostile_gguf.py::test_what_the_rules_miss_the_child_load_refuses",
    "damaged or changed export":
        "test_export.py::test_an_export_changed_after_it_was_written_is_refused_before_loading",
    "invalid ONNX graph": "test_export.py::test_a_broken_onnx_graph_is_refused_by_the_onnx_checker",
    "prompt token id outside the vocabulary":
        "test_error_paths.py::test_prompt_ids_outside_the_vocabulary_are_refused_before_any_backend_sees_them",
    "Ctrl-C in generate": "test_interrupt.py::test_ctrl_c_during_generate_stops_with_exit_130",
    "Ctrl-C in chat": "test_interrupt.py::test_ctrl_c_during_a_chat_answer_stops_the_answer_not_the_chat",
    "Ctrl-C in fetch": "test_interrupt.py::test_ctrl_c_during_fetch_leaves_no_partial_model",
    "Ctrl-C in export": "test_interrupt.py::test_ctrl_c_during_export_leaves_no_output",
    "unknown --device, --ep-option not KEY=VALUE, memory budget on a GPU":
        "test_error_paths.py::test_bad_device_options_are_one_clear_line",
    "unknown device profile": "test_devices.py::test_an_unknown_profile_is_one_line",
    "--device gpu where no GPU exists: a notice, not an error":
        "test_vulkan.py::test_without_a_gpu_device_the_request_falls_back_to_the_cpu_with_one_notice",
}


def test_every_audited_error_path_names_a_test_that_exists():
    for path, ref in AUDIT.items():
        file, name = ref.split("::")
        tree = ast.parse((HERE / file).read_text())
        names = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        assert name in names, f"{path}: {ref} does not exist"


def test_a_drafter_whose_vocabulary_cannot_be_mapped_is_one_clear_line(smollm2_path, tmp_path):
    from tiny_gguf import write

    # a valid model whose vocabulary spells only eight letters: text cannot go through it
    drafter = write(tmp_path / "eight-letters.gguf", tokens=[*"abcdefgh", "<|endoftext|>"])
    r = edgespec("generate", "hi", "-m", "smollm2-135m", "-d", str(drafter), "-n", "4")
    assert_one_line_error(r, "cannot be mapped to the other model's")


def test_an_unwritable_model_cache_is_one_clear_line():
    env = {**os.environ, "EDGESPEC_CACHE": "/proc/edgespec-cache"}  # not writable, even by root
    assert_one_line_error(edgespec("models", "fetch", "smollm2-135m", env=env), "/proc/edgespec-cache: ")


def test_serving_a_missing_model_is_one_clear_line(tmp_path):
    r = edgespec("serve", str(tmp_path / "nothing.gguf"), "--allow-path", "--port", "0")
    assert_one_line_error(r, "model file not found")


@pytest.mark.real_model
def test_a_chat_message_too_long_for_the_context_is_refused_and_the_chat_goes_on(smollm2_path):
    r = edgespec("chat", "-m", "smollm2-135m", "--ctx", "256", "-n", "8", "--plain",
                 stdin="word " * 400 + "\nSay hi.\n/quit\n")
    assert r.returncode == 0 and "Traceback" not in r.stderr
    assert "the message was not sent, the chat goes on" in r.stderr
    assert r.stderr.count("tok/s") == 1  # the next message was answered


@pytest.mark.real_model
def test_prompt_ids_outside_the_vocabulary_are_refused_before_any_backend_sees_them(smollm2_path):
    from edgespec import EdgeSpec

    llm = EdgeSpec("smollm2-135m", drafter="none", n_ctx=256)
    for bad in (llm.tokenizer.n_vocab, -1):  # llama.cpp aborts the process on the first
        with pytest.raises(ValueError, match=f"prompt token id {bad} is outside the vocabulary"):
            llm.stream_ids([1, bad], max_tokens=4)
    assert llm.generate("Hello", max_tokens=2).token_ids  # still usable afterwards


def test_bad_device_options_are_one_clear_line(smollm2_path):
    assert_one_line_error(edgespec("generate", "hi", "-m", str(smollm2_path), "--device", "tpu"), "unknown --device 'tpu'")
    assert_one_line_error(edgespec("generate", "hi", "-m", str(smollm2_path), "--ep-option", "fp16"),
                          "--ep-option takes KEY=VALUE")
    assert_one_line_error(edgespec("generate", "hi", "-m", str(smollm2_path), "--ep-option", "a=b"),
                          "not an ONNX model")
    # a GPU budget below even the driver-less minimum is refused before the driver is measured
    # (where no GPU exists, as a CPU budget)
    assert_one_line_error(edgespec("generate", "hi", "-m", str(smollm2_path), "--device", "gpu", "-b", "150MB"),
                          "is too small for smollm2")
