"""python -m edgespec.apps.desktop [-m MODEL] [-d DRAFTER] [-b BUDGET]"""

from __future__ import annotations

import argparse
import sys


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m edgespec.apps.desktop", description="A desktop chat window.")
    p.add_argument("-m", "--model", default="qwen2.5-coder-1.5b")
    p.add_argument("-d", "--drafter", default="auto")
    p.add_argument("-b", "--memory-budget", default=None)
    p.add_argument("-n", "--max-tokens", type=int, default=512)
    p.add_argument("--ctx", type=int, default=4096)
    args = p.parse_args()

    import tkinter as tk

    from edgespec import EdgeSpec, EdgespecError

    from edgespec.apps.desktop.window import ChatWindow

    try:
        root = tk.Tk()
    except tk.TclError as e:
        sys.exit(f"error: no display for a window ({e})")
    try:
        llm = EdgeSpec(args.model, drafter=args.drafter, n_ctx=args.ctx, memory_budget=args.memory_budget)
    except EdgespecError as e:
        root.destroy()
        sys.exit(f"error: {e}")
    ChatWindow(root, llm, max_tokens=args.max_tokens)
    try:
        root.mainloop()
    finally:
        llm.close()


if __name__ == "__main__":
    main()
