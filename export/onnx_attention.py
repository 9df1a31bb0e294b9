"""Grouped-query attention without repeated KV heads, for optimum's decoder graphs.

transformers' eager attention repeats each KV head for the query heads that share it
(`repeat_kv`: Unsqueeze, Expand, Reshape), and optimum's export keeps that: every run
writes the whole cache again, H/KV times over, and attention reads that copy. On
SmolLM2-135M (9 query heads, 3 KV heads) at context 2048 the Expand nodes took about
a quarter of a decode run in ONNX Runtime's profiler.

Folding the group into the query rows gives the same products without the copy: the
queries (1, H, n, d) are viewed as (1, KV, H/KV * n, d), multiplied by the
unrepeated keys and values, and the result viewed back as (1, H, n, ·); query head
h = kv * (H/KV) + j reads KV head kv, as in `repeat_kv`. Only reshapes of the
query-side tensors are added. Measured on SmolLM2-135M fp32, the same export folded
and not, alternating in one process: decode 1.51x as fast at context 512 and 1.65x
at 2048, 5-token verification 1.28x and 1.61x; logits within 6e-5.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .onnx_export import save_in_place

_PASS_THROUGH = ("Transpose", "Mul", "Div")  # between the repeated K and its MatMul: K^T and the scale


def fold_grouped_query_attention(model_path: Path, n_head: int, n_kv_head: int) -> int:
    """Rewrite `model_path` in place; returns how many repeated K/V tensors were folded
    (2 per layer when the graph has the pattern, 0 when there is nothing to fold)."""
    import onnx

    if n_kv_head >= n_head or n_head % n_kv_head:
        return 0
    m = onnx.load(str(model_path))
    g = m.graph
    folded = _fold(g, n_head, n_kv_head)
    if not folded:
        return 0
    _prune(g)
    save_in_place(m, model_path)
    return folded


def _fold(g, n_head: int, n_kv_head: int) -> int:
    import onnx
    from onnx import helper, numpy_helper

    producer = {o: n for n in g.node for o in n.output}
    consumers: dict[str, list] = {}
    for n in g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    presents = {o.name for o in g.output if o.name.startswith("present.")}
    to_kv = numpy_helper.from_array(np.array([0, n_kv_head, -1, 0], np.int64), "gqa_fold.to_kv")
    to_heads = numpy_helper.from_array(np.array([0, n_head, -1, 0], np.int64), "gqa_fold.to_heads")
    new_nodes: list[tuple[object, list]] = []  # (folded MatMul, [reshape before, reshape after])
    folded = 0
    for expand in [n for n in g.node if n.op_type == "Expand"]:
        unsq = producer.get(expand.input[0])
        if unsq is None or unsq.op_type != "Unsqueeze" or unsq.input[0] not in presents:
            continue  # not a repeated cache tensor (e.g. the attention mask)
        reshape = _only(consumers.get(expand.output[0]))
        if reshape is None or reshape.op_type != "Reshape":
            continue
        # follow K^T and the scale to the MatMul that reads the repeated tensor as its right
        # side; Shape nodes may read it too, for its length, which folding keeps
        chain, t = [], reshape.output[0]
        shapes = [n for n in consumers.get(t, []) if n.op_type == "Shape"]
        if not all(_reads_no_heads(n, consumers, g) for n in shapes):
            continue
        node = _only([n for n in consumers.get(t, []) if n.op_type != "Shape"])
        while node is not None and node.op_type in _PASS_THROUGH and node.input[0] == t and _fits(node, g):
            chain.append(node)
            t = node.output[0]
            node = _only(consumers.get(t))
        if node is None or node.op_type != "MatMul" or node.input[1] != t:
            continue
        matmul = node
        # the chain now starts from the unrepeated tensor
        first = chain[0] if chain else matmul
        first.input[0 if chain else 1] = unsq.input[0]
        for shape in shapes:
            shape.input[0] = unsq.input[0]
        q_in, out = matmul.input[0], matmul.output[0]
        tag = f"gqa_fold.{folded}"
        matmul.input[0], matmul.output[0] = f"{tag}.left", f"{tag}.product"
        new_nodes.append((matmul, [
            helper.make_node("Reshape", [q_in, to_kv.name], [f"{tag}.left"], name=f"{tag}/to_kv"),
            helper.make_node("Reshape", [f"{tag}.product", to_heads.name], [out], name=f"{tag}/to_heads"),
        ]))
        folded += 1
    if folded:
        g.initializer.extend([to_kv, to_heads])
        around = {matmul.output[0]: pair for matmul, pair in new_nodes}  # a folded MatMul's new output name
        nodes = []
        for n in g.node:  # keep the graph in topological order: reshape, MatMul, reshape back
            before, after = around.get(n.output[0] if n.output else "", (None, None))
            nodes += [x for x in (before, n, after) if x is not None]
        copies = []
        for x in nodes:  # copied out before the field is cleared, which would drop them
            c = onnx.NodeProto()
            c.CopyFrom(x)
            copies.append(c)
        del g.node[:]
        g.node.extend(copies)
    return folded


def _reads_no_heads(shape, consumers: dict, g) -> bool:
    """A Shape of the repeated tensor whose readers only take single dimensions
    other than the heads (axis 1), which folding changes."""
    readers = consumers.get(shape.output[0], [])
    for r in readers:
        if r.op_type != "Gather":
            return False
        index = _constant(r.input[1], g)
        if index is None or index.size != 1 or int(index) in (1, -3):
            return False
    return bool(readers)


def _constant(name: str, g) -> np.ndarray | None:
    from onnx import numpy_helper

    for init in g.initializer:
        if init.name == name:
            return numpy_helper.to_array(init)
    for n in g.node:
        if n.op_type == "Constant" and name in n.output:
            for a in n.attribute:
                if a.name == "value":
                    return numpy_helper.to_array(a.t)
    return None


def _only(nodes: list | None):
    return nodes[0] if nodes and len(nodes) == 1 else None


def _fits(node, g) -> bool:
    """A pass-through node must not mix heads: K^T swaps the last two axes only, and
    the scale is one number."""
    if node.op_type == "Transpose":
        perm = next((list(a.ints) for a in node.attribute if a.name == "perm"), None)
        return perm == [0, 1, 3, 2]
    scale = _constant(node.input[1], g)
    return scale is not None and scale.size == 1


def _prune(g) -> None:
    """Drop the nodes whose outputs nothing reads any more (the Unsqueeze, Expand and
    Reshape of each folded tensor, and the shape arithmetic that fed them)."""
    outputs = {o.name for o in g.output}
    while True:
        used = {i for n in g.node for i in n.input} | outputs
        dead = [n for n in g.node if not any(o in used for o in n.output)]
        if not dead:
            break
        for n in dead:
            g.node.remove(n)
    used = {i for n in g.node for i in n.input}
    for init in [i for i in g.initializer if i.name not in used]:
        g.initializer.remove(init)
