"""Memory budgets on a real model: the prediction against psutil's measurement,
a long chat that stays under its budget, and budgets that cannot be met."""

import json
import subprocess
import sys

import pytest

from helpers import assert_one_line_error, edgespec, register_the_docs_drafter

pytestmark = pytest.mark.real_model

# Runs a command and prints the peak RSS of that command alone (its process is
# this wrapper's only child), in bytes, on standard error.
PEAK_OF_CHILD = """
import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdin=sys.stdin)
print("peak-rss", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024, file=sys.stderr)
sys.exit(r.returncode)
"""


def run_measured(args, stdin):
    r = subprocess.run([sys.executable, "-c", PEAK_OF_CHILD, sys.executable, "-m", "edgespec", *args],
                       input=stdin, capture_output=True, text=True, timeout=900)
    peak = int(r.stderr.rsplit("peak-rss ", 1)[1].split()[0])
    return r, peak


def test_predicted_footprint_is_within_ten_percent_of_the_measured_peak(smollm2_path, tmp_path):
    for drafter, ctx in (("none", 512), ("auto", 4096)):
        out = tmp_path / f"{drafter}.json"
        r = edgespec("profile", str(smollm2_path), "-d", drafter, "--ctx", str(ctx), "-n", "32", "--limit", "1",
                     "--json", str(out))
        assert r.returncode == 0, r.stderr
        run = json.loads(out.read_text())["rows"][0]  # a record of one run
        assert abs(run["predicted_total"] / run["peak_rss"] - 1) < 0.10, run["components"]
        assert "predicted" in r.stdout and "measured" in r.stdout


def test_fifty_turn_chat_stays_under_its_budget(smollm2_path):
    budget = 240_000_000  # below SmolLM2's 4096-token footprint: the planner must shrink something
    turns = [f"Tell me one fact about the number {i}." for i in range(50)]
    r, peak = run_measured(["chat", "--model", str(smollm2_path), "--memory-budget", "240MB", "--max-tokens", "32"],
                           stdin="\n".join(turns) + "\n/quit\n")
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("tok/s") == 50  # every turn answered
    assert "memory plan:" in r.stderr and "context" in r.stderr
    assert "dropped to fit the context" in r.stderr  # the chat outgrew the planned context and went on
    print(f"peak RSS {peak / 1e6:.0f} MB over 50 turns, budget {budget / 1e6:.0f} MB")
    assert peak <= budget


def test_a_budget_below_the_minimum_is_one_clear_line(smollm2_path):
    r = edgespec("generate", "hi", "--model", str(smollm2_path), "--memory-budget", "100MB")
    assert_one_line_error(r, "too small for smollm2-135m: plain decoding needs at least")
    assert_one_line_error(edgespec("generate", "hi", "--model", str(smollm2_path), "-b", "lots"),
                          "not a memory size")


API_EXAMPLE = """
import json, sys
from edgespec import EdgeSpec
from edgespec.memory.plan import BudgetError
with EdgeSpec(sys.argv[1], drafter="auto", memory_budget="400MB", quiet=True) as llm:
    llm.generate("def add(a, b):", max_tokens=16)
    out = {"plan": llm.plan.to_dict(), "n_ctx": llm.backend.n_ctx, "footprint": llm.footprint()}
try:
    EdgeSpec(sys.argv[1], memory_budget="10MB", quiet=True)
except BudgetError as e:
    out["refusal"] = str(e)
print(json.dumps(out))
"""


def test_the_api_exposes_the_plan_and_the_live_footprint(smollm2_path):
    # a fresh process: a budget covers a whole process, and peak RSS never comes down
    r = subprocess.run([sys.executable, "-c", API_EXAMPLE, str(smollm2_path)], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    plan, mem = out["plan"], out["footprint"]
    assert plan["budget"] == 400_000_000 and plan["drafter"] == "auto" and out["n_ctx"] == plan["n_ctx"]
    assert mem["rss"] <= mem["peak"] <= mem["budget"]
    assert mem["predicted"] == plan["predicted"]["total"]
    assert "needs at least" in out["refusal"]


def test_a_drafter_added_as_the_docs_say_runs_under_a_memory_budget(smollm2_path, monkeypatch):
    from edgespec import EdgeSpec
    from edgespec.memory.footprint import process_rss

    name = register_the_docs_drafter(monkeypatch)
    budget = process_rss()["rss"] + 300_000_000  # a budget covers the whole process, earlier tests' memory too
    with EdgeSpec(str(smollm2_path), drafter=name, n_ctx=1024, memory_budget=budget, quiet=True) as llm:
        out = llm.generate("Repeat after me: = = = = = = = = = = = =", max_tokens=24)
        assert llm.plan.drafter == name and llm.plan.footprint.total <= budget
        assert out.text and llm.last_stats.by_key.keys() <= {name}  # only the period drafted, if anything


def test_reserving_fewer_logits_rows_changes_no_logit(smollm2_path):
    """A plan reserves logits for its longest verification only (n_outputs_max); a call
    asking for more is split into several decodes (llama.cpp would abort) and every
    logit is the same."""
    import numpy as np

    from edgespec.runtimes.llamacpp import LlamaCppBackend

    ids = [1, 504, 3458, 282, 253, 1345, 314, 260]
    full = LlamaCppBackend(smollm2_path, n_ctx=256, n_threads=2)
    bounded = LlamaCppBackend(smollm2_path, n_ctx=256, n_threads=2, n_outputs_max=3)
    try:
        for n_logits in (1, 3, 8):  # 8 rows exceed the reservation of 3
            full.rollback(0)
            bounded.rollback(0)
            np.testing.assert_array_equal(bounded.eval(ids, n_logits), full.eval(ids, n_logits))
    finally:
        full.close()
        bounded.close()


def test_a_drafter_that_fits_only_trimmed_is_trimmed_once_and_drafts_losslessly(smollm2_path, tmp_path, monkeypatch,
                                                                                capsys):
    """SmolLM2-135M drafting for itself: under a budget its full vocabulary does not fit, the plan
    trims the drafter (VocabTrim, sliced from the GGUF as it is) and speculation stays lossless."""
    from pathlib import Path

    import edgespec.export.gguf_trim
    from helpers import always_draft
    from edgespec.api import EdgeSpec
    from edgespec.drafters import make_drafter
    from edgespec.memory.make_plan import make_plan
    from edgespec.memory.drafter_choice import TRIM_KS
    from edgespec.speculative.engine import Engine
    from prompts import PROMPTS
    from test_real_lossless import assert_lossless_up_to_near_ties

    monkeypatch.setattr(edgespec.export.gguf_trim, "cache_dir", lambda: tmp_path)  # trims are built into this cache
    model = str(smollm2_path)
    budget = budget_the_drafter_misses(model)
    p = make_plan(model, model, 1024, 8, budget)
    trimmed = Path(p.drafter)
    assert trimmed.parent.parent == tmp_path / "trimmed" and p.n_ctx == 1024 and p.footprint.total <= budget
    assert "trimmed to its" in p.notes[0] and "with its full vocabulary it does not fit" in p.notes[0]
    manifest = json.loads((trimmed.parent / "manifest.json").read_text())
    assert manifest["trim_k"] in TRIM_KS and manifest["source_sha256"]
    assert make_plan(model, model, 1024, 8, budget).drafter == p.drafter  # built once: found by the next plan

    llm = EdgeSpec(model, drafter="none", n_ctx=1024)
    prompt_ids = [llm.chat_ids([{"role": "user", "content": q}]) for q in PROMPTS[:4]]
    plain = []
    for ids in prompt_ids:
        llm.engine.reset()
        plain.append(list(llm.engine.generate(ids, 128)))
    controller = always_draft(max_k=8)
    drafter = make_drafter(p.drafter, llm.tokenizer.n_vocab, controller, llm.tokenizer, n_ctx=1024)
    assert drafter.backend.vocab_map is not None  # it drafts with the trimmed head
    engine = Engine(llm.backend, drafter, controller=controller, calibrate=False)
    assert_lossless_up_to_near_ties(engine, prompt_ids, plain, f"smollm2-135m trimmed to {manifest['trim_k']}", capsys)


def budget_the_drafter_misses(model: str) -> int:
    """A budget just below what `model` drafting for itself needs at context 1024."""
    from edgespec.memory.footprint import process_rss
    from edgespec.memory.make_plan import make_plan

    budget = process_rss()["rss"] + 400_000_000  # a budget covers this whole process, whatever ran in it before
    while make_plan(model, model, 1024, 8, budget, trim=False).drafter == model:
        budget -= 2_000_000
    return budget - 2_000_000  # a little lower still: this process's memory moves a little between plans


def test_a_drafter_that_cannot_be_trimmed_falls_back_to_model_free_drafting_and_says_why(smollm2_path, monkeypatch):
    import edgespec.memory.make_plan
    from edgespec.errors import ModelError
    from edgespec.memory.make_plan import make_plan

    def fail(src, k):
        raise ModelError("no space left on device")

    monkeypatch.setattr(edgespec.memory.make_plan, "cached_trim", fail)
    model = str(smollm2_path)
    p = make_plan(model, model, 1024, 8, budget_the_drafter_misses(model))
    assert p.drafter == "auto" and p.n_ctx == 1024
    assert p.notes[0] == f"{model} could not be trimmed to fit (no space left on device)"
