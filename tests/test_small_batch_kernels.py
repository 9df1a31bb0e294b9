"""A small batch multiplied at once agrees with its rows multiplied one at a time.

llama.cpp as install.sh builds it carries edgespec's x86 kernels for batches of up to 32 rows
(runtimes/patches): each weight block is unpacked once for every row of the batch, where
llama.cpp's own kernels unpack it again per row. So a batch is compared with its rows one by one
through llama.cpp's own kernels (the switch off). The two sum the same integer products in
another order of float additions, so they agree to float rounding (the existing kernels' own
batched paths differ from their one-row path by as much).

The build chooses one kernel set by the CPU it is built for: AVX-512 VNNI where the CPU has it,
else AVX2. Each case names its set and runs only where the installed llama.cpp runs that set.
The VNNI set takes one row too (it streams the weights faster than llama.cpp's one-row kernels),
and a row's sums are then the same instructions at any batch size: bit for bit batch-invariant.

The weights go through ggml as a model's do: quantized by ggml, placed in a plain CPU buffer
(the file's layout) or in the CPU backend's repacking buffer (the layout llama.cpp gives
Q4_K and Q4_0 at load on an AVX2 CPU).
"""

import os
from contextlib import nullcontext

import numpy as np
import pytest

from edgespec.runtimes.ggml_matmul import Ggml, MatMul
from edgespec.runtimes.llamacpp import SMALL_BATCH_SWITCH, llama_cpp_kernels_only, small_batch_isa, small_batch_kernels

TYPES = ["q4_K", "q5_K", "q6_K", "q8_0", "q4_0"]
REPACKED_ON_AVX2 = ["q4_K", "q4_0"]  # repack.cpp's choice for x86 with AVX2
ROUNDING = 1e-5  # relative to the largest output; the kernels measure about 1e-6
K, N = 512, 64   # two super-blocks per row, 8 blocks of 8 repacked rows
ROWS = [*range(1, 18), 32, 33]  # the engine's batches go to 17 (16 drafted tokens); past 32 llama.cpp's own path


def avx2() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return " avx2 " in f.read()
    except OSError:
        return False


@pytest.fixture(scope="module")
def ggml():
    g = Ggml(threads=2)
    yield g
    g.close()


def together_and_apart(ggml, type_name: str, repacked: bool, w: bytes, x: np.ndarray, own_kernels: bool = True):
    """The quantized weights `w` times the rows of `x` as one batch, and one row at a time (by
    llama.cpp's own kernels, unless `own_kernels` is False)."""
    rows = len(x)
    batch, one = MatMul(ggml, type_name, w, N, K, rows, repacked), MatMul(ggml, type_name, w, N, K, 1, repacked)
    try:
        together = batch(x)
        with llama_cpp_kernels_only() if own_kernels else nullcontext():
            return together, np.stack([one(x[i:i + 1])[0] for i in range(rows)])
    finally:
        batch.close()
        one.close()


def batch_and_rows(ggml, type_name: str, repacked: bool, rows: int, seed: int = 0, own_kernels: bool = True):
    rng = np.random.default_rng(seed)
    w = ggml.quantize(type_name, rng.standard_normal((N, K)))
    x = rng.standard_normal((rows, K)).astype(np.float32)
    return together_and_apart(ggml, type_name, repacked, w, x, own_kernels)


KERNEL_SETS = ["avx2", "avx512-vnni"]


def runs(kernel_set: str):
    """Skips a case of `kernel_set` where the installed llama.cpp runs the other set, or none."""
    isa = small_batch_isa()
    return pytest.mark.skipif(isa != kernel_set, reason=f"the installed llama.cpp runs the {isa} kernels, not {kernel_set}")


LAYOUTS = [*((t, False) for t in TYPES), *((t, True) for t in REPACKED_ON_AVX2)]
CASES = [pytest.param(t, repacked, k, marks=runs(k)) for k in KERNEL_SETS for t, repacked in LAYOUTS]


@pytest.mark.parametrize("type_name, repacked, kernel_set", CASES)
def test_a_batch_of_up_to_33_rows_agrees_with_its_rows_one_by_one(ggml, type_name, repacked, kernel_set):
    for rows in ROWS:
        together, apart = batch_and_rows(ggml, type_name, repacked, rows)
        assert np.abs(together - apart).max() <= ROUNDING * np.abs(apart).max(), f"{type_name}, {rows} rows"


@pytest.mark.parametrize("type_name, repacked, kernel_set", CASES)
def test_the_largest_quants_against_the_largest_activations_sum_without_overflow(ggml, type_name, repacked, kernel_set):
    """Every activation at the q8 extreme (127 in size) and nearly every weight at its type's top
    quant: the kernels' 16-bit partial sums are at their largest, and must not saturate."""
    top = np.full((N, K), 8.0)
    top[:, ::16] = 0.0   # each 16 weights' least, so the rest quantize to the top
    w = ggml.quantize(type_name, top)
    for rows in (2, 8, 17, 32):
        x = np.ones((rows, K), np.float32) * np.where(np.arange(rows) % 2, 1.0, -1.0)[:, None]
        together, apart = together_and_apart(ggml, type_name, repacked, w, x)
        assert np.abs(together - apart).max() <= ROUNDING * np.abs(apart).max(), f"{type_name}, {rows} rows"


VNNI_LAYOUTS = [(t, repacked) for t, repacked in LAYOUTS if t.endswith("_K")]  # the K-quant kernels


@pytest.mark.parametrize("type_name, repacked", VNNI_LAYOUTS)
@runs("avx512-vnni")
def test_with_vnni_a_rows_result_is_the_same_bits_in_a_batch_of_any_size(ggml, type_name, repacked):
    """One row takes the VNNI kernels too, and each row's sums run the same instructions whatever
    the batch: these products give a token in a verification batch the same bits as when it is
    decoded alone (the rest of the graph may still round differently)."""
    for rows in (2, 3, 8, 9, 17, 32):
        together, apart = batch_and_rows(ggml, type_name, repacked, rows, own_kernels=False)
        assert np.array_equal(together, apart), f"{type_name}, {rows} rows"


def test_activations_quantize_to_q8_K_byte_for_byte_as_ggmls_reference_does(ggml):
    """A K-quant product first quantizes its activations to Q8_K (on AVX-512 by the patch's SIMD
    conversion): the same scale, quants and sums as the scalar reference, for values over nine
    orders of magnitude, magnitudes tied between signs, all-zero blocks, and products that fall
    halfway between two integers (rounded to even)."""
    rng = np.random.default_rng(0)
    cases = {
        "scales": rng.standard_normal(4096) * 10.0 ** rng.integers(-4, 5, 4096),
        "ties": rng.integers(-4, 5, 4096).astype(np.float64),
        "zero blocks": np.concatenate([np.zeros(256), rng.standard_normal(256), np.full(256, -0.0), np.ones(256)]),
        "halfway": rng.integers(-1000, 1001, 4096) * 0.5 / 127,
    }
    for name, x in cases.items():
        x = x.astype(np.float32)
        assert ggml.activations_q8_K(x) == ggml.activations_q8_K(x, reference=True), name


@pytest.mark.skipif(not avx2(), reason="the kernels are x86 AVX2 ones")
def test_the_installed_llama_cpp_has_the_kernels_and_the_switch_turns_them_off(ggml):
    """install.sh applied the patch, and the path is live: with the switch off a batch is
    llama.cpp's own computation, whose float additions land differently in some output."""
    assert small_batch_kernels(), "llama-cpp-python was built without runtimes/patches (see install.sh's output)"
    assert SMALL_BATCH_SWITCH not in os.environ
    for repacked in (False, True):
        with_kernels, _ = batch_and_rows(ggml, "q4_K", repacked, 4, seed=1)
        with llama_cpp_kernels_only():
            without, _ = batch_and_rows(ggml, "q4_K", repacked, 4, seed=1)
        assert SMALL_BATCH_SWITCH not in os.environ
        assert not np.array_equal(with_kernels, without), f"repacked={repacked}: the switch changed nothing"
        assert np.abs(with_kernels - without).max() <= ROUNDING * np.abs(without).max()


@pytest.mark.real_model
@pytest.mark.skipif(not avx2(), reason="the kernels are x86 AVX2 ones")
def test_a_real_models_batch_picks_the_same_tokens_with_the_kernels_on_and_off():
    """Gemma-3-270M (Q4_K and Q6_K weights, Q4_K repacked at load) verifying batches of 2-17
    tokens of a real text: the logits with edgespec's kernels and with llama.cpp's own agree to
    the rounding batched kernels already differ by; a top token may differ only at a near-tie
    (tests/test_real_lossless.py's 0.3)."""
    from edgespec.models.store import resolve
    from edgespec.runtimes.llamacpp import LlamaCppBackend

    b = LlamaCppBackend(resolve("gemma3-270m", quiet=True), n_ctx=1024, n_threads=2)
    try:
        ids = b.tokenizer.encode(open(__file__).read()[:4000])
        b.eval(ids[:200], n_logits=1)
        for k in range(2, 18):
            start = b.n_past
            with_kernels = b.eval(ids[200:200 + k]).copy()
            b.rollback(start)
            with llama_cpp_kernels_only():
                own = b.eval(ids[200:200 + k]).copy()
            b.rollback(start)
            assert np.abs(with_kernels - own).max() <= 0.05 * np.abs(own).max(), f"{k} tokens"
            for a, o in zip(with_kernels, own):
                top, their_top = int(a.argmax()), int(o.argmax())
                assert top == their_top or abs(o[top] - o[their_top]) < 0.3, f"{k} tokens: not a near-tie"
    finally:
        b.close()
