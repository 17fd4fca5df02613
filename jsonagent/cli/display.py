"""What a person sees in the terminal: steps live on stderr, the answer on stdout."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console
from rich.markup import escape

from .. import events as ev
from ..result import RunResult
from ..store import resume_command

_SHOW = 600  # characters of an observation worth showing live


class Display:
    def __init__(self, quiet: bool = False, stored: bool = False):
        self.quiet = quiet
        self.stored = stored
        """Runs are kept in the store, so a paused one can be resumed by its id."""
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
        elif isinstance(event, ev.Approval):
            verdict = "[green]approved[/]" if event.approved else "[red]denied[/]"
            p(f"  {verdict} {escape(event.tool)}" + (f": {escape(event.reason)}" if event.reason else ""))
        elif isinstance(event, ev.RunResumed):
            p(f"[dim]resuming run {event.run_id}[/]")
        elif isinstance(event, ev.ContextChange):
            p(f"  [dim]context {event.action}: {event.tokens_before} → {event.tokens_after} tokens "
              f"(budget {event.budget})[/]")
        elif isinstance(event, ev.JsonModeChange):
            p(f"  [yellow]! endpoint refused json mode {event.old}; using {event.new}[/]")

    def approve(self, tool: str, args: dict) -> bool | None:
        """Show the exact call and ask y/N; end of input means nobody is there to decide."""
        self.err.print(f"[bold magenta]? allow this call?[/] [bold cyan]{escape(tool)}[/]")
        for name, value in args.items():
            text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            self.err.print(f"    [dim]{escape(name)}:[/] {escape(text)}")
        try:
            answer = self.read("[y/N]> ")
        except EOFError:
            return None
        return answer.strip().lower() in ("y", "yes")

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
        if pending is not None and pending.kind == "question":
            self.err.print(f"[bold magenta]? {escape(pending.question or '')}[/]")
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
            p = result.pending
            what = (f"approval of {p.tool} {_brief(p.args)}" if p.kind == "approval"
                    else f"an answer: {p.question}")
            self.err.print(f"[magenta]paused, waiting for {escape(what)}[/]")
            if self.stored:
                self.err.print(f"resume with: {escape(resume_command(result.run_id, p.model_dump()))}")
        else:
            self.err.print(f"[red]{result.status}:[/] {escape(result.error or '')}")
        s = result.stats
        self.err.print(f"[dim]{_n(len(result.steps), 'step')}, {_n(s.model_calls, 'model call')}, "
                       f"{_n(s.repairs, 'repair')}, {_n(s.reasks, 're-ask')}, "
                       f"{result.usage.prompt_tokens}+{result.usage.completion_tokens} tokens"
                       + (f", run {result.run_id}" if self.stored else "") + "[/]")


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _brief(obj: Any) -> str:
    text = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False, default=str)
    return text if len(text) <= _SHOW else text[:_SHOW] + f"… (+{len(text) - _SHOW} chars)"
