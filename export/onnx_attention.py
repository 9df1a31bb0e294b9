"""Grouped-query attention for optimum's decoder graphs: without repeated KV heads
(the fold), then fused into one node per layer that writes the cache in place.

transformers' eager attention repeats each KV head for the query heads that share it
(`repeat_kv`: Unsqueeze, Expand, Reshape), and optimum's export keeps that: every run
writes the whole cache again, H/KV times over, and attention reads that copy.

Folding the group into the query rows gives the same products without the copy: the
queries (1, H, n, d) are viewed as (1, KV, H/KV * n, d), multiplied by the
unrepeated keys and values, and the result viewed back as (1, H, n, ·); query head
h = kv * (H/KV) + j reads KV head kv, as in `repeat_kv`. Only reshapes of the
query-side tensors are added.

optimum's graph also concatenates the past cache with each run's rows (a fresh copy
of the whole cache every run). `fuse_group_query_attention` replaces each folded
layer's attention core (scores, mask, softmax, values) by ONNX Runtime's
GroupQueryAttention, whose cache can be one buffer bound as both past and present.
What each step gains is in docs/design.md.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgespec.export.onnx_export import save_in_place
from edgespec.runtimes.onnxruntime import SEQLENS, TOTAL

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

    producer, consumers = _links(g)
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


def _links(g) -> tuple[dict, dict[str, list]]:
    """Each tensor's producing node, and the nodes reading it."""
    producer = {o: n for n in g.node for o in n.output}
    consumers: dict[str, list] = {}
    for n in g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    return producer, consumers


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
        return _perm(node) == [0, 1, 3, 2]
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


# -- GroupQueryAttention with the cache written in place ------------------------------

_SCALES = ("Mul", "Div")
_SCORES_TO_PROBS = {"Reshape", "Add", "Softmax", "IsNaN", "Where", "Cast"}  # the mask, softmax, NaN guard


def fuse_group_query_attention(model_path: Path, n_head: int, n_kv_head: int) -> int:
    """Replace each layer's attention core in a folded graph (see
    `fold_grouped_query_attention`) by one com.microsoft.GroupQueryAttention node;
    returns the number of layers fused, and leaves the file alone (0) unless every
    layer matches, so a model has one cache layout.

    The fused graph reads `seqlens_k` and `total_sequence_length` instead of
    `attention_mask`: attention is causal over the first `total_sequence_length`
    rows of the cache. Bound to one buffer as both `past_key_values.*` and
    `present.*` (IO binding), the cache is written in place: a run writes its own
    rows and copies nothing else, and rolling back is a smaller `seqlens_k`.
    """
    import onnx

    if n_head % n_kv_head:
        return 0
    m = onnx.load(str(model_path))
    g = m.graph
    layers = _attention_cores(g)
    if not layers:
        return 0
    _fuse(m, layers, n_head, n_kv_head)
    _prune(g)
    used = {i for n in g.node for i in n.input}
    for x in [x for x in g.input if x.name == "attention_mask" and x.name not in used]:
        g.input.remove(x)
    live = {o for n in g.node for o in n.output} | {i.name for i in g.input}
    for v in [v for v in g.value_info if v.name not in live]:
        g.value_info.remove(v)
    save_in_place(m, model_path)
    return len(layers)


def _attention_cores(g) -> list[dict] | None:
    """Per layer, the tensors around its attention core, or None if any layer's graph
    is not the folded pattern: Concat(past, new) for K and V; scores = (q * a) @ (K^T * b)
    with the group folded into the query rows; mask, softmax; probs @ V; then the heads
    transposed back and flattened for o_proj."""
    producer, consumers = _links(g)
    cores = []
    keys = sorted((o.name for o in g.output if o.name.startswith("present.") and o.name.endswith(".key")),
                  key=lambda s: int(s.split(".")[1]))
    if not keys:
        return None
    for present_k in keys:
        layer = present_k.split(".")[1]
        present_v = f"present.{layer}.value"
        ck, cv = producer.get(present_k), producer.get(present_v)
        if not (_is_concat_of(ck, f"past_key_values.{layer}.key") and _is_concat_of(cv, f"past_key_values.{layer}.value")):
            return None
        # K side: present -> K^T -> scale -> scores MatMul (right side)
        node, t, scale = _only([n for n in consumers.get(present_k, []) if n.op_type != "Shape"]), present_k, 1.0
        while node is not None and node.op_type in ("Transpose", *_SCALES) and node.input[0] == t and _fits(node, g):
            if node.op_type != "Transpose":
                scale = _scaled(scale, node, g)
            t = node.output[0]
            node = _only(consumers.get(t))
        scores = node
        if scores is None or scores.op_type != "MatMul" or scores.input[1] != t:
            return None
        # Q side: the folded view of the scaled, rotated queries
        to_kv = producer.get(scores.input[0])
        if to_kv is None or to_kv.op_type != "Reshape" or not to_kv.name.startswith("gqa_fold."):
            return None
        q = to_kv.input[0]
        while (n := producer.get(q)) is not None and n.op_type in _SCALES and _fits(n, g):
            scale, q = _scaled(scale, n, g), n.input[0]
        # probs @ V, then back to (1, n, H*d) for o_proj
        pv = _only([n for n in consumers.get(present_v, []) if n.op_type == "MatMul" and n.input[1] == present_v])
        if pv is None or (left := producer.get(pv.input[0])) is None or not left.name.startswith("gqa_fold."):
            return None
        if not _only_softmax_between(scores.output[0], left, consumers):
            return None
        chain, t = [], pv.output[0]
        for op in ("Reshape", "Transpose", "Reshape"):
            n = _only(consumers.get(t))
            if n is None or n.op_type != op or (op == "Transpose" and _perm(n) != [0, 2, 1, 3]):
                return None
            chain.append(n)
            t = n.output[0]
        if not any(n.op_type == "MatMul" for n in consumers.get(t, [])):
            return None
        cores.append({"layer": layer, "q": q, "k": ck.input[1], "v": cv.input[1], "concats": (ck, cv),
                      "out": chain[-1], "scale": scale})
    return cores


def _fuse(m, cores: list[dict], n_head: int, n_kv_head: int) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    g = m.graph
    flat = numpy_helper.from_array(np.array([0, 0, -1], np.int64), "gqa_fuse.flat")
    g.initializer.append(flat)
    g.input.extend([helper.make_tensor_value_info(SEQLENS, TensorProto.INT32, ["batch_size"]),
                    helper.make_tensor_value_info(TOTAL, TensorProto.INT32, [])])
    replace = {}
    for c in cores:
        tag, L = f"gqa_fuse.{c['layer']}", c["layer"]
        nodes = []
        for side in ("q", "k", "v"):  # (1, heads, n, d) -> (1, n, heads * d)
            nodes.append(helper.make_node("Transpose", [c[side]], [f"{tag}.{side}_t"], perm=[0, 2, 1, 3],
                                          name=f"{tag}/{side}_t"))
            nodes.append(helper.make_node("Reshape", [f"{tag}.{side}_t", flat.name], [f"{tag}.{side}"],
                                          name=f"{tag}/{side}"))
        nodes.append(helper.make_node(
            "GroupQueryAttention",
            [f"{tag}.q", f"{tag}.k", f"{tag}.v", f"past_key_values.{L}.key", f"past_key_values.{L}.value", SEQLENS, TOTAL],
            [c["out"].output[0], f"present.{L}.key", f"present.{L}.value"],
            domain="com.microsoft", name=f"{tag}/attention", num_heads=n_head, kv_num_heads=n_kv_head,
            scale=float(c["scale"])))
        replace[c["out"].output[0]] = nodes
    dropped = {x.output[0] for c in cores for x in c["concats"]}  # nodes by their (unique) first output
    nodes = []
    for n in g.node:  # the fused node takes the place of the reshape for o_proj: its inputs come before
        if n.output[0] in dropped:
            continue
        for x in replace.get(n.output[0], [n]):
            c = onnx.NodeProto()
            c.CopyFrom(x)
            nodes.append(c)
    del g.node[:]
    g.node.extend(nodes)
    if not any(o.domain == "com.microsoft" for o in m.opset_import):
        m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    for o in g.output:  # the cache keeps its full length now
        if o.name.startswith("present."):
            o.type.tensor_type.shape.dim[2].dim_param = "cache_length"


def _is_concat_of(node, past: str) -> bool:
    return (node is not None and node.op_type == "Concat" and len(node.input) == 2 and node.input[0] == past
            and any(a.name == "axis" and a.i in (2, -2) for a in node.attribute))


def _perm(node) -> list[int] | None:
    return next((list(a.ints) for a in node.attribute if a.name == "perm"), None)


def _scaled(scale: float, node, g) -> float:
    c = float(_constant(node.input[1], g).reshape(()))
    return scale * c if node.op_type == "Mul" else scale / c


def _only_softmax_between(scores: str, probs_view, consumers: dict) -> bool:
    """Everything reading the scores until the folded view of the probabilities is mask,
    softmax and NaN-guard arithmetic, with one Softmax: nothing else attention does."""
    seen, todo, softmax = set(), [scores], 0
    while todo:
        t = todo.pop()
        for n in consumers.get(t, []):
            if n.output[0] == probs_view.output[0] or n.output[0] in seen:
                continue
            if n.op_type not in _SCORES_TO_PROBS:
                return False
            seen.add(n.output[0])
            softmax += n.op_type == "Softmax"
            todo.extend(n.output)
    return softmax == 1
