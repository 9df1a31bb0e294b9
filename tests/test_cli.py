"""The command line: useful output, and bad input as one clear line with no traceback."""

import json
from collections import Counter
from pathlib import Path

import pytest

from helpers import assert_one_line_error, bench_rows, edgespec


def test_version_and_help():
    r = edgespec("--version")
    assert r.returncode == 0 and r.stdout.startswith("edgespec ")
    r = edgespec("generate", "--help")
    assert r.returncode == 0 and "--drafter" in r.stdout and "Example" in r.stdout


def test_the_cli_offers_the_drafters_of_the_registry_by_their_names():
    """The CLI writes the names out (it starts without importing the drafters); they are the registry's."""
    import inspect

    from edgespec.cli.bench import bench
    from edgespec.cli.common import DrafterOpt
    from edgespec.drafters.registry import AUTO, PLAIN, model_free

    assert DrafterOpt.default == AUTO
    assert DrafterOpt.help.startswith(", ".join(model_free()) + ";")
    bench_default = inspect.signature(bench).parameters["drafters"].default.default
    assert bench_default.split(",") == [d for d in model_free() if d != PLAIN]


def test_models_list_names_the_four_models():
    r = edgespec("models", "list", "--json")
    assert r.returncode == 0
    assert {m["name"] for m in json.loads(r.stdout)} >= {"smollm2-135m", "qwen2.5-coder-1.5b"}


def test_models_list_shows_every_full_name_in_80_columns():
    import os

    from edgespec.models.store import MODELS

    r = edgespec("models", "list", env={**os.environ, "COLUMNS": "80"})
    assert r.returncode == 0 and max(map(len, r.stdout.splitlines())) <= 80
    names = {line.split("│")[1].strip() for line in r.stdout.splitlines() if line.startswith("│")}
    assert set(MODELS) <= names  # the name to type is on screen, whole


def test_missing_model_file(tmp_path):
    r = edgespec("generate", "hi", "--model", str(tmp_path / "missing.gguf"))
    assert_one_line_error(r, "model file not found")


def test_unknown_model_name():
    assert_one_line_error(edgespec("generate", "hi", "--model", "llama-9000"), "unknown model 'llama-9000'")


def test_corrupt_gguf(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + bytes(range(256)) * 4)
    assert_one_line_error(edgespec("generate", "hi", "--model", str(bad)), "corrupt GGUF")


def test_unknown_drafter(tmp_path):
    assert_one_line_error(edgespec("generate", "hi", "--drafter", "psychic"), "unknown drafter 'psychic'")


def test_bad_prompts_file(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"category": "code"}\n')
    assert_one_line_error(edgespec("bench", "--prompts", str(f), "--model", "smollm2-135m"), "line 1")


def test_the_held_out_prompts_load_as_a_bench_workload():
    from importlib import resources

    from edgespec.bench.common import load_prompts

    held_out = resources.files("edgespec").joinpath("data/heldout_prompts.jsonl")
    rows = load_prompts(Path(str(held_out)))
    assert Counter(r["category"] for r in rows) == {"code": 6, "summarize": 6, "chat": 6}
    shipped = {json.dumps(r["messages"]) for r in load_prompts(None)}
    assert not shipped & {json.dumps(r["messages"]) for r in rows}  # none of them tuned on
    assert load_prompts(Path("heldout")) == rows  # named, as `edgespec bench --prompts heldout`
    assert len(load_prompts(Path("all"))) == len(rows) + len(load_prompts(None))


@pytest.mark.real_model
def test_prompt_longer_than_the_context(smollm2_path):
    r = edgespec("generate", "word " * 400, "--model", str(smollm2_path), "--ctx", "128")
    assert_one_line_error(r, "the prompt is 401 tokens; the context holds")  # llama.cpp pads n_ctx to 256


@pytest.mark.real_model
def test_generate_json_reports_text_ids_and_stats(smollm2_path):
    r = edgespec("generate", "def add(a, b):", "--model", str(smollm2_path), "--drafter", "lookup",
                 "--max-tokens", "24", "--seed", "1", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["text"] and len(d["token_ids"]) <= 24 and d["prompt_ids"]
    assert {"tokens_per_s", "acceptance_rate", "mean_accepted"} <= set(d["stats"])


@pytest.mark.real_model
def test_chat_answers_and_understands_its_commands(smollm2_path):
    r = edgespec("chat", "--model", str(smollm2_path), "--max-tokens", "16",
                 stdin="Say hello.\n/stats\n/reset\nSay bye.\n/quit\n")
    assert r.returncode == 0, r.stderr
    assert "conversation cleared" in r.stderr
    assert '"generated_tokens"' in r.stderr  # /stats prints the last answer's statistics
    assert r.stderr.count("tok/s") == 2  # a stats line after each answer


@pytest.mark.parametrize("command", ["generate", "chat", "bench", "profile", "serve", "export", "doctor", "models list",
                                     "models fetch", "models path", "models verify"])
def test_every_command_explains_itself_with_an_example(command):
    r = edgespec(*command.split(), "--help")
    assert r.returncode == 0 and "Example" in r.stdout


def test_shell_completion_comes_from_typer():
    r = edgespec("--show-completion", "bash")
    assert r.returncode == 0 and "complete" in r.stdout and "COMP_WORDS" in r.stdout


@pytest.mark.real_model
def test_bench_samples_every_row_at_a_temperature(smollm2_path, tmp_path):
    _, rows = bench_rows(tmp_path, "-m", smollm2_path, "--drafters", "lookup", "--temperature", "0.8", "--seed", "3",
                         "--peers", "none", "-n", "16", "--limit", "1")
    assert set(rows) >= {"plain", "lookup"}
    assert rows["plain"]["tokens"] > 0 and rows["lookup"]["tokens"] > 0
    # sampled outputs are not compared with plain's: they differ run to run
    assert all(row["identical_to_plain"] is None for row in rows.values())


@pytest.mark.real_model
def test_bench_replays_text_only_drafters_on_plains_own_output(smollm2_path, tmp_path):
    """Beside the measured rows, `replay:<drafter>` runs the same engine on plain's text
    at the measured batch costs: the drafter's gain without the texts parting at near-ties."""
    out = tmp_path / "rows.json"
    r = edgespec("bench", "-m", str(smollm2_path), "--drafters", "lookup,auto", "--peers", "none", "-n", "32",
                 "--limit", "1", "--json", str(out))
    assert r.returncode == 0, r.stderr
    rows = {(row["drafter"], row["category"]): row for row in json.loads(out.read_text())["rows"]}
    replayed, oracle = rows[("replay:lookup", "code")], rows[("oracle:lookup", "code")]
    # the oracle picks each step's best length on its own, on a timed curve that need not be
    # monotone: a real controller can edge past it, never far
    assert replayed["acceptance_rate"] > 0 and 0 < replayed["ratio_to_plain"] <= oracle["ratio_to_plain"] * 1.1
    assert ("replay:auto", "code") not in rows  # auto's recycling reads logits a replay does not have
    # priced at the curve timed after each of the three categories (the median per size),
    # which the bench prints and the rows keep
    assert "batch cost timed after each category (3 timings, median per size)" in r.stderr
    assert "oracle and replay rows priced at" in r.stderr
    assert replayed["batch_costs_ms"] == oracle["batch_costs_ms"] and replayed["batch_costs_ms"][0] > 0
    plain = rows[("plain", "all")]
    assert plain["batch_costs_ms"] == oracle["batch_costs_ms"] and plain["batch_cost_timings"] == 3
    assert "other processes kept" in r.stderr  # how busy the cores were while it timed
    # auto mixes lookup with other drafters: it is set against lookup, with the run's precision
    mixed = rows[("auto", "all")]["against_best_member"]
    assert mixed["best_member"] == "lookup" and mixed["prompts"] == 3
    assert mixed["interval"][0] <= mixed["ratio"] <= mixed["interval"][1]
    assert "hybrids against the best single drafter" in r.stdout


@pytest.mark.real_model
def test_bench_runs_every_method_in_a_process_of_its_own_and_peers_against_their_own_plain(
        smollm2_path, monkeypatch):
    """A user runs one engine: each method decodes in a process of its own, plain decoding
    too, and every one is stopped at the end. llama-cpp-python's prompt lookup is compared
    with llama-cpp-python's own plain generation."""
    from rich.console import Console

    from edgespec.bench import run
    from edgespec.bench.common import load_prompts

    started = []
    real_worker = run.Worker

    def recording_worker(label, spec):
        w = real_worker(label, spec)
        started.append(w)
        return w

    monkeypatch.setattr(run, "Worker", recording_worker)
    cfg = run.BenchConfig(str(smollm2_path), load_prompts("shipped", 1), ["lookup", "auto"], max_tokens=16, ctx=2048,
                          threads=2, max_draft=8)
    rows = run.run_bench(cfg, Console(stderr=True))
    assert sorted(w.label for w in started) == ["auto", "llama-cpp-python", "llama-cpp-python-lookup", "lookup", "plain"]
    assert len({w.pid for w in started}) == 5
    assert not any(w._proc.is_alive() for w in started)
    by = {(r["drafter"], r["category"]): r for r in rows}
    theirs, their_lookup = by[("llama-cpp-python", "all")], by[("llama-cpp-python-lookup", "all")]
    assert their_lookup["ratio_to_plain"] == pytest.approx(
        their_lookup["tokens_per_s"] / theirs["tokens_per_s"], abs=0.002)
    assert theirs["ratio_to_plain"] == pytest.approx(
        theirs["tokens_per_s"] / by[("plain", "all")]["tokens_per_s"], abs=0.002)
    assert by[("plain", "all")]["overhead_ms_per_token"] is not None  # edgespec's own engine, drafting nothing
    # the methods' processes are the bench's own work, not another program's load on its cores
    assert by[("plain", "all")]["other_cores"] is None or by[("plain", "all")]["other_cores"] < 0.9


def test_bench_refuses_a_temperature_where_it_cannot_measure_one():
    assert_one_line_error(edgespec("bench", "-m", "smollm2-135m", "--temperature", "0.7", "--backend", "fpga-sim"),
                          "--temperature is measured on the CPU rows only")


@pytest.mark.real_model
def test_bench_sets_edgespec_against_llama_servers_own_speculation(smollm2_path, tmp_path):
    """`--peers llama-server` runs llama.cpp's server (built by ./install.sh --dev from the same
    source) plain and with each of its n-gram speculation types on the same prompt ids, and
    every edgespec row says how its gain compares with the best of them."""
    import os

    from edgespec.bench import llama_server

    if llama_server.binary() is None:
        why = "no llama-server built here (./install.sh --dev builds it)"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the llama-server peer: {why}")
        pytest.skip(why)
    out, scratch = tmp_path / "rows.json", tmp_path / "tmp"
    scratch.mkdir()
    r = edgespec("bench", "-m", str(smollm2_path), "--drafters", "lookup", "--peers", "llama-server",
                 "-n", "32", "--limit", "1", "--json", str(out), env={**os.environ, "TMPDIR": str(scratch)})
    assert r.returncode == 0, r.stderr
    rows = {(row["drafter"], row["category"]): row for row in json.loads(out.read_text())["rows"]}
    for name in ["llama-server", *(f"llama-server:{t}" for t in llama_server.SPEC_TYPES)]:
        assert rows[(name, "all")]["tokens"] > 0, name
    own_plain, mod = rows[("llama-server", "all")], rows[("llama-server:ngram-mod", "all")]
    # each speculation type is compared with llama-server's own plain decoding
    assert mod["ratio_to_plain"] == pytest.approx(mod["tokens_per_s"] / own_plain["tokens_per_s"], abs=0.002)
    # greedy on the same ids with the same attention kernels: llama-server's plain writes plain's
    # text, so its types' ratios and edgespec's are measured on the same answers
    prompts = rows[("lookup", "all")]["identical_to_plain"].split("/")[1]
    assert rows[("llama-server", "all")]["identical_to_plain"] == f"{prompts}/{prompts}"
    best = max(rows[(f"llama-server:{t}", "code")]["ratio_to_plain"] for t in llama_server.SPEC_TYPES)
    lookup = rows[("lookup", "code")]
    assert lookup["x_best_peer"] == pytest.approx(lookup["ratio_to_plain"] / best, abs=0.002)
    assert "x best peer" in r.stdout
    # the servers' decoding is the bench's own work, not another program's load on its cores
    assert own_plain["other_cores"] is None or own_plain["other_cores"] < 0.9
    assert not [p for p in psutil_children_named("llama-server")]  # every server was stopped
    assert not list(scratch.iterdir())  # and its log removed
    # the record says how each server ran, with the model by its file name
    assert mod["server_command"].startswith(f"llama-server -m {smollm2_path.name} -c ")
    assert mod["server_command"].endswith("--spec-type ngram-mod")


@pytest.mark.real_model
def test_llama_servers_tokens_per_second_are_read_as_it_reports_them(smollm2_path):
    """The bench counts a server's decoding like its own: the tokens after the first over the
    time from the first to the last, which is llama-server's own `predicted_per_second`."""
    from edgespec.bench import llama_server

    if llama_server.binary() is None:
        pytest.skip("no llama-server built here (./install.sh --dev builds it)")
    server = llama_server.LlamaServer(llama_server.binary(), smollm2_path, 512, 2, [])
    try:
        answer = server.complete([1, 504, 3458, 282], 24)
    finally:
        server.close()
    tokens, seconds, _, _ = llama_server.decode_timing(answer, lambda t: False)
    assert len(tokens) == answer["timings"]["predicted_n"] == 24
    assert (len(tokens) - 1) / seconds == pytest.approx(answer["timings"]["predicted_per_second"], rel=1e-6)


def psutil_children_named(name):
    import psutil

    return [p for p in psutil.process_iter(["name"]) if p.info["name"] == name]


def test_the_structured_prompts_hold_their_answers_in_every_row_and_price_the_grammar(smollm2_path, tmp_path):
    """`--prompts structured`: edgespec's rows follow each row's response_format or tools through
    llguidance, llama-server's through its own GBNF grammar; the grammar's cost is printed."""
    import os

    from edgespec.bench import llama_server
    from edgespec.bench.common import load_prompts

    if llama_server.binary() is None:
        why = "no llama-server built here (./install.sh --dev builds it)"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the llama-server peer: {why}")
        pytest.skip(why)
    rows = load_prompts(Path("structured"))
    assert {r["category"] for r in rows} == {"structured"} and sum("tools" in r for r in rows) == 2
    out = tmp_path / "rows.json"
    r = edgespec("bench", "-m", str(smollm2_path), "--prompts", "structured", "--limit", "4", "--drafters", "auto",
                 "--peers", "llama-server", "-n", "80", "--json", str(out))  # the extraction schema's shortest answer: 68
    assert r.returncode == 0, r.stderr
    got = {(row["drafter"], row["category"]): row for row in json.loads(out.read_text())["rows"]}
    assert got[("auto", "all")]["forced_tokens"] > 0 and got[("plain", "all")]["forced_tokens"] == 0
    assert 0 < got[("auto", "all")]["grammar_ms_per_verified_token"] < 5
    assert got[("llama-server", "all")]["tokens"] > 0 and "x_best_peer" in got[("auto", "all")]
    assert "ms per verified token" in r.stdout
    assert not any(name.startswith(("oracle:", "replay:")) for name, _ in got)  # they know no grammar


def test_tools_left_to_the_model_are_measured_against_llama_server_waiting_for_a_call(smollm2_path, tmp_path):
    """A prompt whose tools leave tool_choice at "auto": edgespec's rows hold a call to the tools
    once it opens, llama-server's the same through a lazy grammar, as its chat handler does;
    llama-cpp-python's Llama has no lazy grammar, so asking for it says so in a line."""
    from edgespec.bench import llama_server

    if llama_server.binary() is None:
        pytest.skip("no llama-server built here (./install.sh --dev builds it)")
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
    prompts = tmp_path / "agent.jsonl"
    prompts.write_text("".join(json.dumps({"category": "agent", "messages": [{"role": "user", "content": ask}],
                                           "tools": [weather]}) + "\n"
                               for ask in ("What is the weather in Oslo?", "Say hello to Ada.")))
    out = tmp_path / "rows.json"
    r = edgespec("bench", "-m", str(smollm2_path), "--prompts", str(prompts), "--drafters", "auto",
                 "--peers", "llama-server", "-n", "40", "--json", str(out))
    assert r.returncode == 0, r.stderr
    got = {row["drafter"]: row for row in json.loads(out.read_text())["rows"] if row["category"] == "agent"}
    assert got["auto"]["tokens"] > 0 and got["llama-server"]["tokens"] > 0
    assert_one_line_error(edgespec("bench", "-m", str(smollm2_path), "--prompts", str(prompts)),
                          "tool_choice auto needs a lazy grammar")


def test_generate_follows_a_json_schema_file_and_chat_answers_json(smollm2_path, tmp_path):
    schema = tmp_path / "city.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}},
                                  "required": ["city"], "additionalProperties": False}))
    r = edgespec("generate", "The capital of France, as JSON.", "--chat", "-m", str(smollm2_path),
                 "--json-schema", str(schema), "-n", "40")
    assert r.returncode == 0, r.stderr
    assert set(json.loads(r.stdout)) == {"city"}
    r = edgespec("chat", "-m", str(smollm2_path), "--json", "-n", "60", stdin="Name a fruit.\n/quit\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout.lstrip("> ").startswith("{")
    (tmp_path / "broken.json").write_text("{")
    assert_one_line_error(edgespec("generate", "hi", "-m", str(smollm2_path), "--json-schema",
                                   str(tmp_path / "broken.json")), "is not JSON")
