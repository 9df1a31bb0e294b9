"""One FFN-sized 4-bit product on ONNX Runtime (MatMulNBits, random weights), per kind of
zero point and compute type: what the 4-bit exports' layout rests on (docs/design.md).

    python3 -m edgespec.bench.matmul_nbits --json docs/bench/matmul-nbits-epyc-zen4-2core.json
    # K 1536, N 8960 (Qwen2.5-Coder-1.5B's FFN), block 32, 2 threads
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from edgespec.bench.record import MATMUL_NBITS, emit, record


def session(k: int, n: int, block: int, zero_points: str, accuracy_level: int, threads: int):
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nb = -(-k // block)
    inits = [numpy_helper.from_array(rng.integers(0, 255, (n, nb, block // 2), dtype=np.uint8), "B"),
             numpy_helper.from_array(rng.random(n * nb, dtype=np.float32) * 0.01, "S")]
    if zero_points == "float":  # as HQQ writes them
        inits.append(numpy_helper.from_array(rng.random(n * nb, dtype=np.float32) * 15, "Z"))
    elif zero_points == "uint8":  # 4 bits each, two to a byte
        inits.append(numpy_helper.from_array(rng.integers(0, 255, n * -(-nb // 2), dtype=np.uint8), "Z"))
    node = helper.make_node("MatMulNBits", ["A", *(i.name for i in inits)], ["Y"], domain="com.microsoft",
                            K=k, N=n, bits=4, block_size=block, accuracy_level=accuracy_level)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("A", TensorProto.FLOAT, [None, k])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [None, n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def timed_ms(s, k: int, rows: int) -> float:
    """Milliseconds per call on `rows` random rows, after three warm-up calls."""
    a = np.random.default_rng(1).random((rows, k), dtype=np.float32)
    for _ in range(3):
        s.run(None, {"A": a})
    t = time.perf_counter()
    for _ in range(20):
        s.run(None, {"A": a})
    return (time.perf_counter() - t) / 20 * 1000


def main(argv: list[str] | None = None) -> int:
    import onnxruntime

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-k", type=int, default=1536)
    ap.add_argument("-n", type=int, default=8960)
    ap.add_argument("--block", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path, help="write the rows, the machine and the command here")
    args = ap.parse_args(argv)
    rows = []
    for zp in ("none (8)", "uint8", "float"):
        for level, compute in ((0, "float32"), (4, "int8")):
            s = session(args.k, args.n, args.block, zp.split()[0], level, args.threads)
            rows.append({"zero_points": zp, "compute": compute, "ms_1_row": round(timed_ms(s, args.k, 1), 3),
                         "ms_16_rows": round(timed_ms(s, args.k, 16), 3)})
    rec = record(rows, f"MatMulNBits K {args.k}, N {args.n}, block {args.block}", "python3 -m edgespec.bench.matmul_nbits",
                 kind=MATMUL_NBITS, threads=args.threads, onnxruntime=onnxruntime.__version__)
    return emit(rec, args.json)


def table(rec: dict) -> list[str]:
    """ms per call of one 4-bit product per kind of zero point and compute type."""
    return ["| zero points | compute | 1 row, ms | 16 rows, ms |", "|---|---|---:|---:|"] + [
        f"| {r['zero_points']} | {r['compute']} | {r['ms_1_row']:.2f} | {r['ms_16_rows']:.2f} |"
        for r in rec["rows"]] + [
        "", f"Random weights; onnxruntime {rec['onnxruntime']}, {rec['threads']} threads, each call timed 20 times."]


if __name__ == "__main__":
    sys.exit(main())
