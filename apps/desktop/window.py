"""The chat window: a transcript, a message box, Send and Stop, and a status bar
with tokens/s, acceptance and memory against the budget.

Tk is single-threaded: the generation runs in a worker thread that only puts
pieces on a queue; the window drains it every few milliseconds.
"""

from __future__ import annotations

import queue
import threading
import time
import tkinter as tk
from tkinter import ttk

from edgespec import EdgeSpec, EdgespecError, Stream

POLL_MS = 30


class ChatWindow:
    def __init__(self, root: tk.Tk, llm: EdgeSpec, max_tokens: int = 512, system: str | None = None) -> None:
        self.root, self.llm, self.max_tokens = root, llm, max_tokens
        self.base = [{"role": "system", "content": system}] if system else []
        self.messages: list[dict] = list(self.base)
        self.stream: Stream | None = None
        self.events: queue.Queue = queue.Queue()
        self.answer = ""
        self.first_piece_at: float | None = None
        self.n_pieces = 0

        root.title(f"edgespec · {llm.model_name}")
        root.geometry("760x560")
        root.columnconfigure(0, weight=1)
        root.rowconfigure(0, weight=1)

        frame = ttk.Frame(root, padding=6)
        frame.grid(row=0, column=0, sticky="nsew")
        frame.columnconfigure(0, weight=1)
        frame.rowconfigure(0, weight=1)
        self.transcript = tk.Text(frame, wrap="word", state="disabled", font=("DejaVu Sans", 11), padx=6, pady=6)
        self.transcript.tag_configure("user", foreground="#1f4e9a", font=("DejaVu Sans", 11, "bold"))
        self.transcript.tag_configure("note", foreground="#888888")
        scroll = ttk.Scrollbar(frame, command=self.transcript.yview)
        self.transcript.configure(yscrollcommand=scroll.set)
        self.transcript.grid(row=0, column=0, sticky="nsew")
        scroll.grid(row=0, column=1, sticky="ns")

        bottom = ttk.Frame(root, padding=(6, 0, 6, 6))
        bottom.grid(row=1, column=0, sticky="ew")
        bottom.columnconfigure(0, weight=1)
        self.entry = tk.Text(bottom, height=3, wrap="word", font=("DejaVu Sans", 11))
        self.entry.grid(row=0, column=0, rowspan=2, sticky="ew")
        self.entry.bind("<Return>", self._on_return)
        self.send_button = ttk.Button(bottom, text="Send", command=self.send)
        self.send_button.grid(row=0, column=1, padx=(6, 0), sticky="ew")
        self.stop_button = ttk.Button(bottom, text="Stop", command=self.stop, state="disabled")
        self.stop_button.grid(row=1, column=1, padx=(6, 0), sticky="ew")

        self.status = tk.StringVar(value=self._memory_text())
        ttk.Label(root, textvariable=self.status, anchor="w", relief="sunken", padding=(6, 2)).grid(
            row=2, column=0, sticky="ew")
        root.protocol("WM_DELETE_WINDOW", self.close)
        self.entry.focus_set()

    # -- actions --------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return self.stream is not None

    def send(self, text: str | None = None) -> bool:
        """Send the message box's text (or `text`); False if nothing was sent."""
        if self.busy:
            return False
        text = (text if text is not None else self.entry.get("1.0", "end")).strip()
        if not text:
            return False
        self.messages.append({"role": "user", "content": text})
        try:
            ids, dropped = self.llm.fit_messages(self.messages, self.max_tokens, keep=len(self.base))
        except EdgespecError as e:
            self.messages.pop()  # the text stays in the box: nothing the user wrote is lost
            self.status.set(f"not sent: {e}")
            return False
        self.entry.delete("1.0", "end")
        if dropped:
            self._append(f"(the oldest {dropped} turn(s) were dropped to fit the context)\n", "note")
        self._append(f"You: {text}\n", "user")
        self._append("Assistant: ")
        self.answer, self.first_piece_at, self.n_pieces = "", None, 0
        self.stream = self.llm.stream_ids(ids, max_tokens=self.max_tokens)
        threading.Thread(target=self._generate, args=(self.stream,), daemon=True).start()
        self.send_button.configure(state="disabled")
        self.stop_button.configure(state="normal")
        self.root.after(POLL_MS, self._poll)
        return True

    def stop(self) -> None:
        if self.stream is not None:
            self.stream.cancel()

    def close(self) -> None:
        self.stop()
        self.root.destroy()

    # -- the worker and the window's side of it --------------------------------

    def _generate(self, stream: Stream) -> None:
        try:
            for piece in stream:
                self.events.put(("piece", piece))
            self.events.put(("done", stream.completion))
        except Exception as e:  # shown in the status bar, never a dead window
            self.events.put(("error", str(e)))

    def _poll(self) -> None:
        finished = None
        try:
            while True:
                kind, value = self.events.get_nowait()
                if kind == "piece":
                    self.first_piece_at = self.first_piece_at or time.perf_counter()
                    self.answer += value
                    self.n_pieces += 1
                    self._append(value)
                else:
                    finished = (kind, value)
                    break
        except queue.Empty:
            pass
        if finished is None:
            self.status.set(self._live_text())
            self.root.after(POLL_MS, self._poll)
            return
        kind, value = finished
        self._append("\n\n")
        if kind == "done":
            self.messages.append({"role": "assistant", "content": value.text})
            note = " (stopped)" if value.finish_reason == "cancelled" else ""
            self.status.set(f"{value.stats.summary()}{note} · {self._memory_text()}")
        else:
            self.messages.pop()
            self.status.set(f"error: {value}")
        self.stream = None
        self.send_button.configure(state="normal")
        self.stop_button.configure(state="disabled")

    def _live_text(self) -> str:
        st = self.llm.last_stats  # written by the worker; read for display only
        rate = ""
        if self.first_piece_at is not None and st.generated_tokens > 1:
            rate = f"{st.generated_tokens / max(time.perf_counter() - self.first_piece_at, 1e-6):.1f} tok/s · "
        accept = f"acceptance {st.acceptance_rate:.0%} · " if st.drafted else ""
        return f"generating: {st.generated_tokens} tokens · {rate}{accept}{self._memory_text()}"

    def _memory_text(self) -> str:
        fp = self.llm.footprint()
        text = f"memory {fp['rss'] / 1e6:,.0f} MB"
        if fp["budget"]:
            text += f" of {fp['budget'] / 1e6:,.0f} MB budget"
        return text

    def _append(self, text: str, tag: str | None = None) -> None:
        self.transcript.configure(state="normal")
        self.transcript.insert("end", text, tag or ())
        self.transcript.configure(state="disabled")
        self.transcript.see("end")

    def _on_return(self, event: tk.Event) -> str | None:
        if event.state & 0x1:  # Shift+Return: a new line in the message
            return None
        self.send()
        return "break"
