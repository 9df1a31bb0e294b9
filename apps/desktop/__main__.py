"""python -m edgespec.apps.desktop [-m MODEL] [-d DRAFTER] [-b BUDGET]"""

from __future__ import annotations

import argparse
import sys


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m edgespec.apps.desktop", description="A desktop chat window.")
    # model, drafter and budget left out: EdgeSpec's own defaults (the store's default model, auto)
    p.add_argument("-m", "--model", default=argparse.SUPPRESS)
    p.add_argument("-d", "--drafter", default=argparse.SUPPRESS)
    p.add_argument("-b", "--memory-budget", default=argparse.SUPPRESS)
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
        chosen = {k: v for k, v in vars(args).items() if k in ("model", "drafter", "memory_budget")}
        llm = EdgeSpec(n_ctx=args.ctx, **chosen)
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
