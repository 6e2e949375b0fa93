"""What kinject prints of names and paths (a plugin's name, a task's path, a run folder) never reaches the terminal as
a control sequence: :func:`printable` shows every control character as its escape (``\\x1b``), and every console the
program prints on (:func:`safe`) and its log lines (:func:`safe_log`) pass their text through it."""

from __future__ import annotations

import logging
import re

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_CONTROL_BUT_LINES = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")  # tabs and line breaks kept


def printable(text, lines: bool = False) -> str:
    """``text`` with every control character (an ANSI escape, a carriage return, a bell; a line break or a tab
    unless ``lines``) shown as its Python escape, so it prints as the characters it holds."""
    pattern = _CONTROL_BUT_LINES if lines else _CONTROL
    return pattern.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(text))


class _Escaped:
    """A rich renderable: ``renderable`` as rich renders it, the control characters of its text escaped (rich's own
    styles and cursor moves are not text: they stay)."""

    def __init__(self, renderable):
        self.renderable = renderable

    def __rich_console__(self, console, options):
        from rich.segment import Segment

        for segment in console.render(self.renderable, options):
            if segment.control or not _CONTROL_BUT_LINES.search(segment.text):
                yield segment
            else:
                yield Segment(printable(segment.text, lines=True), segment.style)


def safe(console):
    """``console`` (a rich Console) printing every renderable with its control characters escaped; returned."""
    from rich.console import RenderHook

    if getattr(console, "escapes_control_characters", False):
        return console

    class Escape(RenderHook):
        def process_renderables(self, renderables):
            return [_Escaped(renderable) for renderable in renderables]

    console.push_render_hook(Escape())
    console.escapes_control_characters = True
    return console


def _escape_record(record: logging.LogRecord) -> bool:
    message = record.getMessage()
    if _CONTROL_BUT_LINES.search(message):
        record.msg, record.args = printable(message, lines=True), ()
    return True


def safe_log(logger: logging.Logger) -> None:
    """Escape the control characters of every record ``logger`` logs (once per logger)."""
    if _escape_record not in logger.filters:
        logger.addFilter(_escape_record)
