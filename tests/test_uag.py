"""`edgespec bench --peers hf`: transformers' universal assisted generation (a drafter with
another tokenizer) runs on the same GGUF files and prompt ids, beside edgespec's rows."""

import json

import pytest

from helpers import edgespec
from test_real_lossless import XVOCAB_DRAFTER, XVOCAB_TARGET


@pytest.mark.real_model
def test_bench_runs_transformers_universal_assisted_generation_beside_ours(tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"category": "code", "prompt": 'def fibonacci(n):\n    """Return F(n)."""\n'}) + "\n")
    out = tmp_path / "uag.json"
    r = edgespec("bench", "-m", XVOCAB_TARGET, "--drafters", XVOCAB_DRAFTER, "--peers", "hf", "-n", "16",
                 "--prompts", str(prompts), "--ctx", "512", "--json", str(out))
    assert r.returncode == 0, r.stderr
    rows = {(x["drafter"], x["category"]): x for x in json.loads(out.read_text())["rows"]}
    ours, hf_plain, uag = (rows[(m, "all")] for m in (XVOCAB_DRAFTER, "hf:plain", f"hf:uag:{XVOCAB_DRAFTER}"))
    assert ours["tokens"] > 0 and hf_plain["tokens_per_s"] > 0 and uag["tokens_per_s"] > 0
    # UAG's greedy output is transformers' own plain greedy output, and its drafts were counted
    assert uag["identical_to_plain"] == "1/1" and uag["tokens"] == hf_plain["tokens"]
    assert uag["acceptance_rate"] is not None and uag["mean_accepted"] >= 1
    assert "hf:uag:" in r.stdout
    if XVOCAB_TARGET == "gemma3-270m":
        # transformers' conversion of Gemma-3's GGUF tokenizer splits text otherwise than llama.cpp: said, not hidden
        assert "gemma3-270m.gguf splits 1 of 1 prompts otherwise than llama.cpp" in r.stderr


def test_uag_without_a_model_drafter_is_refused_in_one_line():
    from helpers import assert_one_line_error

    assert_one_line_error(edgespec("bench", "-m", "smollm2-135m", "--drafters", "lookup", "--peers", "hf"),
                          "--peers hf runs transformers' assisted generation with a model drafter")
