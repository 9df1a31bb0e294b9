"""Every method of a bench on every prompt, prompt by prompt, in balanced orders, so the
machine's drift and one method's effect on the next fall on all of them alike."""

from __future__ import annotations

from collections import defaultdict
from typing import Callable, Mapping

from rich.console import Console

from edgespec.bench.common import Run
from edgespec.bench.methods import Method
from edgespec.speculative.verifier import SamplingParams


def balanced_orders(n: int) -> list[list[int]]:
    """Orders of n methods (Williams' design) in which, over all of them, every method runs
    in every position equally often and right after every other method equally often: a
    method that always ran right after another would inherit that one's effect on the
    cores and caches, which a mere rotation keeps. For n = 4: 0132, 1203, 2310, 3021 (each
    of the 12 ordered pairs once); an odd n needs these n orders and their reverses."""
    first = [0] + [(j + 1) // 2 if j % 2 else n - j // 2 for j in range(1, n)]  # 0, 1, n-1, 2, n-2, ...
    orders = [[(m + i) % n for m in first] for i in range(n)]
    return orders if n % 2 == 0 else orders + [o[::-1] for o in orders]


def interleave(methods: Mapping[str, Method], encoded: list[tuple[str, list[int]]], formats: list[dict | None],
               max_tokens: int, params: SamplingParams, console: Console,
               after_category: Callable[[], None]) -> tuple[dict, dict]:
    """Every method on every prompt (held to its format, if any), prompt by prompt, and
    `after_category` after each category's last prompt. Returns the runs by (method, category),
    in prompt order, and for greedy decoding how many of them wrote their plain row's text."""
    from rich.progress import Progress

    runs: dict[tuple[str, str], list[Run]] = defaultdict(list)
    identical: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])  # (method, category) -> [same, runs]
    with Progress(console=console, transient=True) as bar:
        task = bar.add_task("bench", total=len(encoded) * len(methods))
        names = list(methods)
        orders = balanced_orders(len(names))
        last = {cat: i for i, (cat, _) in enumerate(encoded)}
        for i, (cat, ids) in enumerate(encoded):
            now: dict[str, Run] = {}
            for name in (names[j] for j in orders[i % len(orders)]):
                bar.update(task, description=f"{cat}: {name}")
                now[name] = methods[name].run(ids, max_tokens, formats[i])
                bar.advance(task)
            for name in names:  # each device's rows compare with its own plain run (gpu:plain for gpu:*)
                runs[(name, cat)].append(now[name])
                ref = methods[name].plain
                if name != ref and params.greedy:  # sampled outputs differ run to run
                    for c in (cat, "all"):
                        identical[(name, c)][0] += now[name].tokens == now[ref].tokens
                        identical[(name, c)][1] += 1
            if i == last[cat]:
                bar.update(task, description=f"{cat}: timing batch costs")
                after_category()
    return runs, identical
