"""A long session: 500 chat turns on a real model must not grow the process."""

from __future__ import annotations

import gc

import pytest

from edgespec import EdgeSpec
from edgespec.memory.footprint import process_rss

TOPICS = ["river", "colour", "city", "bird", "tree", "metal", "planet", "fruit", "tool", "language"]


@pytest.mark.real_model
def test_five_hundred_chat_turns_keep_memory_flat(smollm2_path):
    llm = EdgeSpec(str(smollm2_path), drafter="auto", n_ctx=1024)
    messages: list[dict] = []
    rss: list[int] = []
    dropped = 0
    for turn in range(500):
        messages.append({"role": "user", "content": f"Turn {turn}: name one {TOPICS[turn % len(TOPICS)]}."})
        ids, n = llm.fit_messages(messages, max_tokens=12)  # the context is trimmed as in `edgespec chat`
        dropped += n
        c = llm.chat_stream(messages, max_tokens=12)
        answer = "".join(c)
        messages.append({"role": "assistant", "content": answer})
        if turn % 10 == 9:
            gc.collect()
            rss.append(process_rss()["rss"])
    llm.close()
    warm = rss[9]  # after 100 turns: the context has filled and been trimmed, the caches have grown
    last = max(rss[-5:])
    growth = (last - warm) / warm
    print(f"\nsoak: 500 turns, {dropped} old turns dropped; RSS after 100 turns {warm / 1e6:.1f} MB, "
          f"highest of the last 50 turns {last / 1e6:.1f} MB: growth {growth:+.2%}")
    assert dropped > 0  # the session did outgrow the context
    assert growth < 0.02
