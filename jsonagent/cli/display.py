"""What a person sees in the terminal: steps live on stderr, the answer on stdout."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console
from rich.markup import escape

from .. import journal as ev
from ..result import RunResult

_SHOW = 600  # characters of an observation worth showing live


class Display:
    def __init__(self, quiet: bool = False):
        self.quiet = quiet
        self.err = Console(stderr=True, highlight=False, soft_wrap=True)
        if hasattr(sys.stdin, "reconfigure"):  # undecodable bytes typed in must not end a chat
            sys.stdin.reconfigure(errors="replace")

    def event(self, event: Any) -> None:
        if self.quiet:
            return
        p = self.err.print
        if isinstance(event, ev.StepTaken):
            if event.thought:
                p(f"[dim]step {event.step}[/] [italic]{escape(event.thought)}[/]")
            p(f"  [bold cyan]→ {escape(event.tool)}[/] {escape(_brief(event.args))}")
        elif isinstance(event, ev.ToolResult):
            style = "red" if event.error else "green"
            p(f"  [{style}]←[/] {escape(_brief(event.observation))} [dim]({event.duration_s:.2f}s)[/]")
            if event.note:
                p("  [yellow]! repeated call; told the model so[/]")
        elif isinstance(event, ev.Reask):
            p(f"  [yellow]! invalid reply ({event.stage}): {escape(event.problem)}; re-asking[/]")
        elif isinstance(event, ev.JsonModeChange):
            p(f"  [yellow]! endpoint refused json mode {event.old}; using {event.new}[/]")

    def ask(self, question: str) -> str | None:
        """The interactive ask-human prompt; end of input means nobody is there to answer."""
        self.err.print(f"[bold magenta]? {escape(question)}[/]")
        try:
            return self.read("your answer> ")
        except EOFError:
            return None

    def read(self, prompt: str) -> str:
        """A line from stdin; the prompt goes to stderr so stdout holds only answers."""
        self.err.print(prompt, end="")
        return input()

    def user_prompt(self, pending: Any) -> str:
        if pending is not None:
            self.err.print(f"[bold magenta]? {escape(str(pending.args.get('question', '')))}[/]")
            return "your answer> "
        return "you> "

    def result(self, result: RunResult) -> None:
        if result.status == "completed":
            answer = result.answer
            if not isinstance(answer, str):
                answer = json.dumps(ev.jsonable(answer), indent=2, ensure_ascii=False)
            sys.stdout.write(answer + "\n")
            sys.stdout.flush()
        elif result.status == "needs_human":
            self.err.print(f"[magenta]needs a human:[/] {escape(result.pending_question or '')}")
        else:
            self.err.print(f"[red]{result.status}:[/] {escape(result.error or '')}")
        s = result.stats
        self.err.print(f"[dim]{len(result.steps)} steps, {s.model_calls} model calls, "
                       f"{s.repairs} repairs, {s.reasks} re-asks, "
                       f"{result.usage.prompt_tokens}+{result.usage.completion_tokens} tokens[/]")


def _brief(obj: Any) -> str:
    text = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False, default=str)
    return text if len(text) <= _SHOW else text[:_SHOW] + f"… (+{len(text) - _SHOW} chars)"
