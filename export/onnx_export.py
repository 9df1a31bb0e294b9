"""ONNX through optimum, with the KV cache, logits for every input position (so k
draft tokens verify in one run), then int8 or int4 quantization with
onnxruntime's own quantizers."""

from __future__ import annotations

import logging
import shutil
import warnings
from pathlib import Path

import numpy as np

from edgespec.export.source import ExportError

ONNX_QUANTS = ("fp32", "int8", "int8-dynamic", "int8-weight-only", "int4", "int4-b32", "int4-b128",
               "int4-f32", "int4-b128-f32")
INT8_COMPUTE = 4  # MatMulNBits accuracy_level: activations quantized to int8 per row and block at run time
_SIDE_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
               "special_tokens_map.json", "chat_template.jinja")


def export_onnx(checkpoint: Path, out: Path, model=None) -> Path:
    """fp32 decoder-with-past in `out`/model.onnx (+ tokenizer and config files).

    `model`: the checkpoint already loaded in float32, exported as it is: loading a second
    copy would hold two float32 models beside the traced graph."""
    from optimum.exporters.onnx import main_export

    task = "text-generation-with-past"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings: expected for decoders, not actionable by users
        try:
            if model is None:
                main_export(str(checkpoint), str(out), task=task, do_validation=False, local_files_only=True)
            else:
                _export_loaded(model, checkpoint, out, task)
        except (ValueError, KeyError) as e:
            raise ExportError(f"optimum could not export {checkpoint}: {str(e).splitlines()[0]}") from None
    path = out / "model.onnx"
    if not path.is_file():
        raise ExportError(f"optimum wrote no model.onnx in {out}")
    return path


def _export_loaded(model, checkpoint: Path, out: Path, task: str) -> None:
    """optimum's export of a loaded model, as `main_export` of `checkpoint` would run it:
    the tokenizer and configs come from the checkpoint's folder, and the cache is on."""
    from optimum.exporters.onnx import onnx_export_from_model

    name, cache = model.config._name_or_path, model.config.use_cache
    model.config._name_or_path, model.config.use_cache = str(checkpoint), True
    try:
        onnx_export_from_model(model, str(out), task=task, do_validation=False)
    finally:
        model.config._name_or_path, model.config.use_cache = name, cache


def save_in_place(model, model_path: Path) -> None:
    """Write a rewritten ModelProto back to `model_path`; past protobuf's 2 GB limit the
    weights go to `<name>_data` beside it, rewritten whole so no stale tensor stays."""
    import onnx

    big = sum(i.ByteSize() for i in model.graph.initializer) > 1.8e9
    data = model_path.with_name(model_path.name + "_data")
    if data.exists():
        data.unlink()
    onnx.save(model, str(model_path), save_as_external_data=big, location=data.name if big else None)


def copy_side_files(src: Path, dst: Path) -> None:
    for name in _SIDE_FILES:
        if (src / name).is_file():
            shutil.copy2(src / name, dst / name)


def quantize_onnx(fp32_dir: Path, out: Path, quant: str) -> Path:
    """Quantize the fp32 export with onnxruntime's quantizers.

    - int8 = int8-dynamic: int8 weights and int8 activations quantized at run
      time, each token's row on its own, per block of 16 (MatMulNBits at
      accuracy level 4, llama.cpp's q8_0 scheme at half its block): faster than fp32.
      quantize_dynamic would give a whole batch one activation scale, set by the first
      token's massive activations; a block of 16 keeps an outlier channel's scale off
      15 neighbours instead of 31, for 5% more bytes and the same speed.
    - int8-weight-only: 8-bit weights in blocks of 32, activations kept float. The most
      faithful 8-bit export, but onnxruntime's CPU kernels have no float path for
      8-bit weights: several times slower than fp32.
    - int4 / int4-b32 / int4-b128: 4-bit MatMulNBits with HQQ (half-quadratic)
      scales and zero points, block 32 or 128, computing in int8 like llama.cpp's
      q4 kernels: a single row costs a fraction of float32 compute. HQQ rather than
      round-to-nearest: weights that already sit on a 4-bit grid are recovered by it.
    - int4-f32 / int4-b128-f32: the same weights computing in float32 (every block
      dequantized at every call): dearer single steps, cheaper extra rows, so
      k-token verification batches cost little more than one token.
    """
    import onnx

    logging.getLogger("onnxruntime.quantization").setLevel(logging.WARNING)
    src = fp32_dir / "model.onnx"
    dst = out / "model.onnx"
    out.mkdir(parents=True, exist_ok=True)
    big = _size(fp32_dir) > 1.8e9  # protobuf's 2 GB limit: keep weights in an external file
    if quant.startswith("int8") or quant.startswith("int4"):
        from onnxruntime.quantization.matmul_nbits_quantizer import (DefaultWeightOnlyQuantConfig,
                                                                      HQQWeightOnlyQuantConfig,
                                                                      MatMulNBitsQuantizer)

        if quant.startswith("int8"):
            weight_only = quant == "int8-weight-only"
            cfg = DefaultWeightOnlyQuantConfig(block_size=32 if weight_only else 16, bits=8, is_symmetric=True,
                                               accuracy_level=None if weight_only else INT8_COMPUTE)
        else:
            cfg = HQQWeightOnlyQuantConfig(block_size=128 if quant.startswith("int4-b128") else 32, bits=4)
        q = MatMulNBitsQuantizer(onnx.load(src), algo_config=cfg)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # HQQ's torch.from_numpy on read-only arrays: harmless here
            q.process()
        int4_in_int8 = quant.startswith("int4") and not quant.endswith("-f32")
        if quant.startswith("int4"):
            _integer_zero_points(q.model.model)
        if int4_in_int8:
            _compute_in_int8(q.model.model)  # HQQ's config takes no accuracy level: set it on each node
        _one_product_per_input(q.model.model)
        if int4_in_int8:
            _residuals_in_8_bits(q.model.model)
        q.model.save_model_to_file(str(dst), use_external_data_format=big)
    else:
        raise ExportError(f"unknown ONNX quantization {quant!r}; choose one of: {', '.join(ONNX_QUANTS)}")
    copy_side_files(fp32_dir, out)
    return dst


def _compute_in_int8(model) -> None:
    import onnx

    for node in model.graph.node:
        if node.op_type == "MatMulNBits":
            kept = [a for a in node.attribute if a.name != "accuracy_level"]
            del node.attribute[:]
            node.attribute.extend([*kept, onnx.helper.make_attribute("accuracy_level", INT8_COMPUTE)])


def _integer_zero_points(model) -> None:
    """HQQ writes a float zero point per block, for which MatMulNBits has no fast kernel:
    every call dequantizes every block (an FFN-sized product takes about 100x the int8
    kernel's time, docs/design.md). Since (q - z) s = (q - zi) s + (zi - z) s with
    zi = round(z), each product becomes MatMulNBits with 4-bit integer zero points (the
    fast kernels) plus the input's block sums times each block's residual (zi - z) s,
    at most half a step. The weights are HQQ's exactly."""
    import onnx
    from onnx import helper, numpy_helper

    g = model.graph
    inits = {t.name: t for t in g.initializer}
    block_sums: dict[tuple[str, int], str] = {}  # an input's block sums, shared by the products reading it (q, k, v)
    nodes = []
    for node in g.node:
        nodes.append(node)
        zp = inits.get(node.input[3]) if node.op_type == "MatMulNBits" and len(node.input) > 3 else None
        if zp is None or zp.data_type != onnx.TensorProto.FLOAT:
            continue
        a = _attributes(node)
        n, bs, x = a["N"], a["block_size"], node.input[0]
        nb = -(-a["K"] // bs)
        scales = numpy_helper.to_array(inits[node.input[2]]).reshape(n, nb)
        z = numpy_helper.to_array(zp).reshape(n, nb)
        zi = np.clip(np.round(z), 0, 15).astype(np.uint8)
        residual = ((zi - z) * scales).T.astype(np.float32)
        g.initializer.remove(zp)
        g.initializer.extend([numpy_helper.from_array(_two_per_byte(zi), zp.name + "_int"),
                              numpy_helper.from_array(residual, zp.name + "_residual")])
        node.input[3] = zp.name + "_int"
        if (x, bs) not in block_sums:
            block_sums[x, bs] = x + f"_block_sums_{bs}"
            nodes += _block_sum_nodes(g, x, a["K"], bs, block_sums[x, bs])
        out = node.output[0]
        node.output[0] = out + "_integer"
        nodes += [helper.make_node("MatMul", [block_sums[x, bs], zp.name + "_residual"], [out + "_residual"]),
                  helper.make_node("Add", [out + "_integer", out + "_residual"], [out])]
    del g.node[:]
    g.node.extend(nodes)


def _two_per_byte(zero_points: np.ndarray) -> np.ndarray:
    """[N, blocks] 4-bit zero points as MatMulNBits reads them: each column's packed two to
    a byte, the even block in the low half."""
    padded = np.pad(zero_points, ((0, 0), (0, zero_points.shape[1] % 2)))
    return (padded[:, 0::2] | padded[:, 1::2] << 4).ravel()


RESIDUAL_BLOCK = 16  # block sums per scale of an 8-bit residual


def _residuals_in_8_bits(model) -> None:
    """A product computing in int8 reads its residuals (`_integer_zero_points`) as 8-bit
    MatMulNBits (symmetric, a scale per 16 block sums) instead of float32: a token reads
    every weight once, and float32 residuals are a sixth of a 4-bit model's bytes. A
    residual is at most half a 4-bit step, so rounding it and the block sums to 8 bits
    moves a product far less than the int8 activations of the product itself do."""
    from onnx import helper, numpy_helper
    from onnxruntime.quantization.matmul_nbits_quantizer import (DefaultWeightOnlyQuantConfig,
                                                                  DefaultWeightOnlyQuantizer)
    from onnxruntime.quantization.onnx_model import ONNXModel

    m = ONNXModel(model)
    inits = {t.name: t for t in m.initializer()}
    readers, producer = m.input_name_to_nodes(), m.output_name_to_node()
    quantizer = DefaultWeightOnlyQuantizer(DefaultWeightOnlyQuantConfig(
        block_size=RESIDUAL_BLOCK, bits=8, is_symmetric=True, accuracy_level=INT8_COMPUTE))
    for n in list(m.nodes()):
        int8 = n.op_type == "MatMulNBits" and _attributes(n).get("accuracy_level") == INT8_COMPUTE
        residual = _residual_of(n, readers, producer, inits) if int8 else None
        if residual is None:
            continue
        mm = residual[1]
        r = numpy_helper.to_array(inits[mm.input[1]])
        packed, scales, _ = quantizer.qbits_block_quant(r)
        name = mm.input[1] + "_8bit"
        m.remove_initializer(inits.pop(mm.input[1]))
        m.graph().initializer.extend([numpy_helper.from_array(packed, name),
                                      numpy_helper.from_array(scales.ravel(), name + "_scales")])
        m.remove_node(mm)
        m.add_node(helper.make_node("MatMulNBits", [mm.input[0], name, name + "_scales"], list(mm.output), name=name,
                                    domain="com.microsoft", K=r.shape[0], N=r.shape[1], bits=8,
                                    block_size=RESIDUAL_BLOCK, accuracy_level=INT8_COMPUTE))
    m.topological_sort()


def _one_product_per_input(model) -> None:
    """Products of one input (an attention block's q, k and v; an MLP's gate and up) become
    one MatMulNBits as wide as all of them, then a Split: one pass over the input instead of
    three, and the narrow k and v (256 columns in Qwen2.5-Coder-1.5B) no longer run alone on
    the thread pool. Their zero points and residuals (`_integer_zero_points`) are joined the
    same way. Every output is the same number as before, in fewer and wider calls."""
    from onnxruntime.quantization.onnx_model import ONNXModel

    m = ONNXModel(model)
    inits = {t.name: t for t in m.initializer()}
    readers, producer = m.input_name_to_nodes(), m.output_name_to_node()
    groups: dict[tuple, list] = {}
    for n in m.nodes():
        if n.op_type == "MatMulNBits" and all(i in inits for i in n.input[1:] if i):
            a = _attributes(n)
            zero_points = len(n.input) > 3 and bool(n.input[3])
            key = (n.input[0], a["K"], a["block_size"], a["bits"], a.get("accuracy_level", 0), zero_points)
            groups.setdefault(key, []).append((n, _residual_of(n, readers, producer, inits)))
    for key, products in groups.items():
        if len(products) > 1 and len({r is None for _, r in products}) == 1:
            _join(m, inits, key, products)
    m.topological_sort()  # the joined nodes were added at the end


def _join(m, inits: dict, key: tuple, products: list) -> None:
    """One group of `_one_product_per_input` (`m` an ONNXModel): the joined nodes in, the
    products, their residuals and their initializers out."""
    from onnx import helper, numpy_helper

    def arrays(nodes: list, i: int) -> list[np.ndarray]:
        return [numpy_helper.to_array(inits[n.input[i]]) for n in nodes]

    x, k, bs, bits, level, zero_points = key
    mats, residuals = [n for n, _ in products], [r for _, r in products]
    name = mats[0].output[0] + "_joined"  # output names are unique in a graph
    widths = [_attributes(n)["N"] for n in mats]
    joined = {name + "_B": np.concatenate(arrays(mats, 1)),  # each array column by column
              name + "_scales": np.concatenate([a.ravel() for a in arrays(mats, 2)]),
              name + "_split": np.array(widths, np.int64)}
    if zero_points:
        joined[name + "_zero_points"] = np.concatenate([a.ravel() for a in arrays(mats, 3)])
    y, outs = name + "_y", [n.output[0] for n in mats]
    inputs = [name + s for s in ("_B", "_scales", "_zero_points")[:2 + zero_points]]
    nodes = [helper.make_node("MatMulNBits", [x, *inputs], [y], domain="com.microsoft",
                              K=k, N=sum(widths), bits=bits, block_size=bs, accuracy_level=level)]
    if residuals[0] is not None:  # each output is its product plus its residuals
        joined[name + "_residual"] = np.concatenate(arrays([mm for _, mm in residuals], 1), axis=1)
        nodes[0].output[0] = name + "_integer"
        nodes += [helper.make_node("MatMul", [residuals[0][1].input[0], name + "_residual"], [name + "_res"]),
                  helper.make_node("Add", [name + "_integer", name + "_res"], [y])]
        outs = [add.output[0] for add, _ in residuals]
    nodes.append(helper.make_node("Split", [y, name + "_split"], outs, axis=-1))
    dropped = [*mats, *(d for r in residuals if r is not None for d in r)]
    for i in {i for d in dropped for i in d.input[1:] if i in inits}:
        m.remove_initializer(inits.pop(i))
    m.remove_nodes(dropped)
    m.graph().initializer.extend(numpy_helper.from_array(v, nm) for nm, v in joined.items())
    m.add_nodes(nodes)


def _residual_of(node, readers: dict, producer: dict, inits: dict) -> tuple | None:
    """(Add, MatMul) adding a product's residuals, if `_integer_zero_points` gave it some."""
    after = readers.get(node.output[0], [])
    if len(after) != 1 or after[0].op_type != "Add":
        return None
    other = next((i for i in after[0].input if i != node.output[0]), None)
    mm = producer.get(other)
    return (after[0], mm) if mm is not None and mm.op_type == "MatMul" and mm.input[1] in inits else None


def _attributes(node) -> dict:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _block_sum_nodes(g, x: str, k: int, bs: int, out: str) -> list:
    """[b, s, K] -> [b, s, ceil(K / bs)]: the sum of each block of bs inputs (the last
    block zero-padded)."""
    from onnx import helper, numpy_helper

    nb, pad = -(-k // bs), -k % bs
    consts = {out + "_shape": np.array([0, 0, nb, bs], np.int64), out + "_axes": np.array([3], np.int64)}
    if pad:
        consts[out + "_pads"] = np.array([0, 0, 0, 0, 0, pad], np.int64)
    g.initializer.extend(numpy_helper.from_array(v, name) for name, v in consts.items())
    nodes = [helper.make_node("Pad", [x, out + "_pads"], [out + "_padded"])] if pad else []
    src = out + "_padded" if pad else x
    return nodes + [helper.make_node("Reshape", [src, out + "_shape"], [out + "_blocks"]),
                    helper.make_node("ReduceSum", [out + "_blocks", out + "_axes"], [out], keepdims=0)]


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
