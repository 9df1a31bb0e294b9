"""The desktop chat window, driven as a user would, on a virtual screen (Xvfb)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from edgespec import EdgeSpec


@pytest.fixture(scope="module")
def display():
    """An X display: the session's own, or a fresh Xvfb (./install.sh --dev installs it)."""
    if os.environ.get("DISPLAY"):
        yield os.environ["DISPLAY"]
        return
    if shutil.which("Xvfb") is None:
        pytest.skip("no DISPLAY and no Xvfb: install Debian's xvfb to run the desktop app's test")
    r, w = os.pipe()
    proc = subprocess.Popen(["Xvfb", "-displayfd", str(w), "-screen", "0", "1024x700x24", "-nolisten", "tcp"],
                            pass_fds=(w,), stderr=subprocess.DEVNULL)
    os.close(w)
    with os.fdopen(r) as f:
        number = f.readline().strip()  # Xvfb picks a free display and writes its number here
    os.environ["DISPLAY"] = f":{number}"
    try:
        yield os.environ["DISPLAY"]
    finally:
        del os.environ["DISPLAY"]
        proc.terminate()
        proc.wait(timeout=10)


def pump(root, until, timeout: float = 60.0) -> None:
    """Run the Tk event loop until `until()` holds."""
    deadline = time.monotonic() + timeout
    while not until():
        assert time.monotonic() < deadline, "the window did not get there in time"
        root.update()
        time.sleep(0.01)


def test_a_prompt_streams_into_the_window_and_stop_cancels_it(display, smollm2_path, tmp_path):
    import tkinter as tk

    from PIL import ImageGrab

    from edgespec.apps.desktop import ChatWindow

    from edgespec.memory.footprint import process_rss

    # the budget covers the whole process, and this pytest process already holds earlier tests' memory
    budget_mb = round(process_rss()["rss"] / 1e6) + 300
    llm = EdgeSpec(str(smollm2_path), drafter="auto", n_ctx=1024, memory_budget=f"{budget_mb}MB")
    root = tk.Tk()
    win = ChatWindow(root, llm, max_tokens=600)
    try:
        pump(root, lambda: root.winfo_viewable())
        assert f"of {budget_mb:,} MB budget" in win.status.get()  # memory against budget before anything runs

        win.entry.insert("1.0", "Tell me a long story about a lighthouse keeper and a storm.")
        win.send_button.invoke()
        assert win.busy and win.entry.get("1.0", "end").strip() == ""
        pump(root, lambda: len(win.answer) > 80)  # mid-answer
        assert win.busy
        assert "tok/s" in win.status.get() and "MB" in win.status.get()

        shot_dir = Path(os.environ.get("EDGESPEC_ARTIFACTS", tmp_path))
        shot_dir.mkdir(parents=True, exist_ok=True)
        shot = shot_dir / "desktop-mid-answer.png"
        x, y = root.winfo_rootx(), root.winfo_rooty()
        image = ImageGrab.grab(bbox=(x, y, x + root.winfo_width(), y + root.winfo_height()), xdisplay=display)
        image.save(shot)
        print(f"\nscreenshot: {shot}")
        assert image.size == (root.winfo_width(), root.winfo_height())
        assert len(image.getcolors(1 << 16) or range(1 << 16)) > 20  # text and widgets, not a blank frame

        win.stop_button.invoke()
        pump(root, lambda: not win.busy)
        assert "(stopped)" in win.status.get()
        assert win.messages[-1] == {"role": "assistant", "content": win.answer}  # the stopped answer is kept
        assert llm.last_stats.finish_reason == "cancelled" and llm.last_stats.generated_tokens < 600

        # the conversation goes on: a second turn is answered after the stopped one
        assert win.send("Thanks. Now one sentence only.")
        pump(root, lambda: not win.busy, timeout=120)
        assert [m["role"] for m in win.messages] == ["user", "assistant", "user", "assistant"]
    finally:
        root.destroy()
        llm.close()


def test_a_message_too_long_for_the_context_stays_in_the_box(display):
    import tkinter as tk

    from edgespec.apps.desktop import ChatWindow
    from edgespec.runtimes.reference import ReferenceBackend, ReferenceModel

    llm = EdgeSpec(ReferenceBackend(ReferenceModel(n_ctx=256)), drafter="none")
    root = tk.Tk()
    win = ChatWindow(root, llm)
    try:
        text = "far too long " * 100
        win.entry.insert("1.0", text)
        assert not win.send()
        assert win.status.get().startswith("not sent:") and "context" in win.status.get()
        assert win.entry.get("1.0", "end").strip() == text.strip() and win.messages == []
    finally:
        root.destroy()
