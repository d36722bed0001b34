"""A job's output as text people read: the lines YOLOv9 writes to its log, made safe and short.

The agent cleans each line before it ships it, and the daemon cleans again what it is sent (it does not
trust a machine): cleaning is idempotent, so the two agree on every byte count, which is what the
agent's offsets (``agent/logship.py``) and the daemon's store (``lifecycle/job_logs.py``) count in.

A line keeps what a terminal would end up showing: tqdm redraws its progress bar with carriage returns,
so only the text after the last one stays; colour and cursor escapes go, and so does every other
control character but the tab (printed to a terminal they could rewrite the screen).
"""

from __future__ import annotations

import re
import unicodedata

# The most output one report carries (UTF-8 bytes of whole lines); the agent's report body limit holds it
# even when every character is escaped in the JSON.
BATCH_BYTES = 128 << 10
MAX_LINE_CHARS = 8192  # a printed tensor or a dataset listing: cut, so one line never fills a batch
CUT_MARK = "…"
# Escape sequences: CSI (colours, cursor moves), OSC (titles, links; ended by BEL or ST), and the two-byte ones.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]?")


def clean_line(line: str) -> str:
    """One line (without its newline) as it is kept: the last carriage-return segment that has text,
    no escape sequences, no control characters but tabs, at most ``MAX_LINE_CHARS`` characters."""
    if "\r" in line:
        segments = [seg for seg in line.split("\r") if seg]
        line = segments[-1] if segments else ""
    if "\x1b" in line:
        line = _ESCAPES.sub("", line)
    line = "".join(c if c == "\t" or unicodedata.category(c)[0] != "C" else " " for c in line)
    if len(line) > MAX_LINE_CHARS:
        line = line[: MAX_LINE_CHARS - len(CUT_MARK)] + CUT_MARK
    return line


def clean_lines(text: str) -> str:
    """Whole lines of output, each cleaned, each ending in a newline ('' stays '')."""
    if not text:
        return ""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    return "".join(clean_line(line) + "\n" for line in lines)


def utf8_size(text: str) -> int:
    return len(text.encode("utf-8"))
