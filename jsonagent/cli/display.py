"""What a person sees in the terminal: steps live on stderr, the answer on stdout.

On a terminal, a spinner says what is going on while the model loads or thinks, code is
shown as a highlighted block and long results are folded. When stderr is not a terminal
the same events are plain lines, and `--output json` shows none of them.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from rich.console import Console
from rich.markup import escape

from .. import events as ev
from ..calls import once_question
from ..ctrlc import ctrl_c_held
from ..result import RunResult
from ..status import COMPLETED, INTERRUPTED, NEEDS_HUMAN
from ..store import resume_command

_SHOW = 600  # characters of an observation worth showing live
_LINES = 12  # lines of a multi-line result shown before the rest is folded


class Display:
    def __init__(self, quiet: bool = False, stored: bool = False):
        self.quiet = quiet
        self.stored = stored
        """Runs are kept in the store, so a paused one can be resumed by its id."""
        self.err = Console(stderr=True, highlight=False, soft_wrap=True)
        self.live = self.err.is_terminal and not quiet
        self._status: Any = None
        self._label: str | None = None  # what the spinner says when no status overrides it
        self._since = 0.0  # when that began: its seconds go on after a status
        self._model_s = 0.0
        self._left = 0  # results still to come of the step shown last (several calls)
        self._writing: tuple[str, int, int] | None = None
        """The run, step and attempt whose thought is being written on the current line."""
        self._written = ""
        self._pad = ""  # the indent of the current event's run in the tree of runs
        self._depths: dict[str, int] = {}  # each run's depth, for its deltas (they carry none)
        if hasattr(sys.stdin, "reconfigure"):  # undecodable bytes typed in must not end a chat
            sys.stdin.reconfigure(errors="replace")

    # -- progress -----------------------------------------------------------------------------

    def status(self, what: str | None) -> None:
        """What slow thing happens now (a model loading, a prompt read), for the spinner;
        None when it is over, and the spinner goes back to what it showed before."""
        if what is not None:
            self._start(what, keep=True)
        elif self._label is not None:
            self._start(self._label, since=self._since)
        else:
            self._stop()

    def _start(self, what: str, keep: bool = False, since: float | None = None) -> None:
        if not self.live:
            return
        label, first = (self._label, self._since) if keep else (what, since)
        self._stop()
        self._label, self._since = label, first or time.monotonic()
        t0 = since or time.monotonic()

        class Elapsed:  # rich renders it on every refresh, so the seconds tick
            def __rich__(self) -> str:
                return f"[dim]{escape(what)} {time.monotonic() - t0:.0f} s[/]"

        # Ctrl-C waits until rich has started or stopped the spinner: half done, its state
        # breaks the next stop (an IndexError from a render hook never pushed) instead of
        # ending the run `interrupted`
        with ctrl_c_held():
            self._status = self.err.status(Elapsed(), spinner="dots")
            self._status.start()

    def _stop(self) -> None:
        self._label = None
        status, self._status = self._status, None
        if status is not None:
            with ctrl_c_held():
                status.stop()

    # -- events -------------------------------------------------------------------------------

    def event(self, event: Any) -> None:
        if self.quiet:
            return
        if isinstance(event, ev.Delta):
            self._delta(event)
            return
        self._stop()
        # a sub-run's events (an agent used as a tool) are indented under the call
        self._depths[event.run_id] = event.depth
        self._pad = "  │ " * event.depth
        p = self._print
        if isinstance(event, ev.RunStart) and event.depth:
            p(f"[dim]↳ sub-run {event.run_id}:[/] {escape(_brief({'task': event.question}))}")
        elif isinstance(event, ev.RunEnd) and event.depth:
            p(f"[dim]↳ sub-run {event.status}[/]")
        if isinstance(event, ev.ModelCall):
            self._model_s += event.latency_s
            return  # the thought being written, if any, goes on on its line
        written = self._end_line()
        as_written = isinstance(event, ev.StepTaken) \
            and written == (event.run_id, event.step, event.thought)
        if written is not None and not as_written:
            p()  # what was written ends here; a repaired step shows its thought again
        if isinstance(event, ev.StepTaken):
            took = f" [dim](model {self._model_s:.1f} s)[/]" if self.live else ""
            self._model_s = 0.0
            if as_written:
                self.err.print(took)  # ends the line the thought was written on
            elif event.thought:
                p(f"[dim]step {event.step}[/] [italic]{escape(event.thought)}[/]{took}")
            calls = event.calls or [{"tool": event.tool, "args": event.args}]
            self._left = len(calls)
            for n, call in enumerate(calls):
                self._call(call["tool"], call["args"], f"{n + 1}. " if event.calls else "")
        elif isinstance(event, ev.ToolResult):
            style = "red" if event.error else "green"
            self._left -= 1
            which = f"{event.call + 1}. " if event.call or self._left > 0 else ""
            p(f"  [{style}]←[/] {which}{escape(self._fold(event.observation))} "
              f"[dim]({'tool ' if self.live else ''}{event.duration_s:.2f}s)[/]")
            if event.note:
                p(f"  [yellow]! {escape(event.note)}[/]")
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
        elif isinstance(event, ev.ModelRetry):
            p(f"  [yellow]! {escape(event.model)} {escape(event.said)}[/]"
              + (" [dim](the reply shown above is void)[/]" if event.restart else ""))
        elif isinstance(event, ev.ModelFallback):
            p(f"  [yellow]! {escape(event.model)} failed ({escape(event.kind)}): "
              f"{escape(event.error)}; {escape(event.fallback)} takes over[/]"
              + (" [dim](the reply shown above is void)[/]" if event.restart else ""))
        self._next(event)

    def _delta(self, delta: Any) -> None:
        """The thought as it is written, in place of the spinner."""
        if not isinstance(delta, ev.ThoughtDelta) or not self.live:
            return
        if self._writing != (delta.run_id, delta.step, delta.attempt):
            self._stop()
            if self._end_line() is not None:
                self.err.print()
            self._writing, self._written = (delta.run_id, delta.step, delta.attempt), ""
            pad = "  │ " * self._depths.get(delta.run_id, 0)
            self.err.print(f"{pad}[dim]step {delta.step}[/] ", end="")
        self._written += delta.text
        self.err.print(delta.text, style="italic", end="", markup=False, highlight=False)

    def _end_line(self) -> tuple[str, int, str] | None:
        """Leave the thought being written, if any: its run, step and the text written."""
        if self._writing is None:
            return None
        written = (*self._writing[:2], self._written)
        self._writing, self._written = None, ""
        return written

    def _print(self, text: Any = "", **kwargs: Any) -> None:
        self.err.print(self._pad + text if isinstance(text, str) else text, **kwargs)

    def _next(self, event: Any) -> None:
        """What happens after this event, as a spinner: the model thinks, or a tool runs."""
        if isinstance(event, ev.RunStart):
            self._start("thinking… step 1,")
        elif isinstance(event, ev.ToolResult) and self._left > 0:
            self._start(f"running {self._left} more call{'s' if self._left > 1 else ''}…")
        elif isinstance(event, ev.ToolResult):
            self._start(f"thinking… step {event.step + 1},")
        elif isinstance(event, ev.Reask):
            self._start(f"thinking again… step {event.step},")
        elif isinstance(event, ev.ModelRetry) and event.wait_s > 0:
            self._start(f"waiting to retry… step {event.step},")
        elif isinstance(event, (ev.RunResumed, ev.JsonModeChange, ev.ModelRetry,
                                ev.ModelFallback)):
            self._start("thinking…")
        elif isinstance(event, ev.StepTaken) or isinstance(event, ev.Approval) and event.approved:
            self._start(f"running {event.tool}…")

    def _call(self, tool: str, args: dict[str, Any], which: str = "") -> None:
        """The call: short arguments inline; code and other multi-line text as a block."""
        blocks = {k: v for k, v in args.items() if isinstance(v, str) and "\n" in v} \
            if self.live else {}
        inline = {k: v for k, v in args.items() if k not in blocks}
        self._print(f"  [bold cyan]→ {which}{escape(tool)}[/] "
                    f"{escape(_brief(inline)) if inline else ''}")
        for name, text in blocks.items():
            from rich.syntax import Syntax

            lexer = "python" if name == "code" or tool == "CodeInterpreterTool" else "text"
            self._print(f"    [dim]{escape(name)}:[/]")
            self._print(Syntax(text, lexer, theme="ansi_dark", line_numbers=False,
                                  background_color="default", padding=(0, 4)))

    def _fold(self, observation: Any) -> str:
        if not self.live:
            return _brief(observation)
        if isinstance(observation, dict) and isinstance(observation.get("stdout"), str):
            # code output reads best as its own lines, with what else came after it
            rest = {k: v for k, v in observation.items()
                    if k != "stdout" and (k, v) != ("exit_code", 0)}
            text = observation["stdout"].rstrip("\n") + (f"\n{json.dumps(rest)}" if rest else "")
        else:
            text = observation if isinstance(observation, str) else \
                json.dumps(observation, ensure_ascii=False, default=str)
        lines = text.splitlines()
        if len(lines) > _LINES:
            lines = lines[:_LINES] + [f"… ({len(lines) - _LINES} more lines)"]
        text = "\n    ".join(lines)
        return text if len(text) <= _SHOW else text[:_SHOW] + f"… (+{len(text) - _SHOW} chars)"

    # -- people -------------------------------------------------------------------------------

    def approve(self, tool: str, args: dict) -> bool | None:
        """Show the exact call and ask y/N; end of input means nobody is there to decide."""
        self._stop()
        self.err.print(f"[bold magenta]? allow this call?[/] [bold cyan]{escape(tool)}[/]")
        for name, value in args.items():
            text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            self.err.print(f"    [dim]{escape(name)}:[/] {escape(text)}")
        try:
            answer = self.read("allow? [y/N] ")
        except EOFError:
            return None
        return answer.strip().lower() in ("y", "yes")

    def each_item(self, pending: Any) -> dict[str, dict] | None:
        """Ask for each item of several a run waits for, in turn: `items` for a resume, or
        None when nobody is there to decide."""
        given: dict[str, dict] = {}
        for item in pending.each:
            if item.kind == "approval":
                decided = self.approve(item.tool, item.args or {})
                if decided is None:
                    return None
                given[item.id] = {"approve": decided}
                continue
            answer = self.ask(item.question or f"what became of the call of {item.tool} "
                              f"(key {item.key})? happened, again or fail")
            if answer is None:
                return None
            given[item.id] = {"answer": answer}
        return given

    def ask(self, question: str) -> str | None:
        """The interactive ask-human prompt; end of input means nobody is there to answer."""
        self._stop()
        self.err.print(f"[bold magenta]? {escape(question)}[/]")
        try:
            return self.read("your answer> ")
        except EOFError:
            return None

    def read(self, prompt: str) -> str:
        """A line from stdin; the prompt goes to stderr so stdout holds only answers."""
        self._stop()
        self.err.print(escape(prompt), end="")
        return _line()

    def user_prompt(self, pending: Any) -> str:
        if pending is not None and pending.kind in ("question", "once"):
            asked = pending.question if pending.kind == "question" else \
                once_question(pending.tool, pending.args, pending.key)
            self.err.print(f"[bold magenta]? {escape(asked or '')}[/]")
            return "your answer> "
        return "you> "

    def result(self, result: RunResult) -> None:
        self._stop()
        if result.status == COMPLETED:
            answer = result.answer
            if not isinstance(answer, str):
                answer = json.dumps(ev.jsonable(answer), indent=2, ensure_ascii=False)
            sys.stdout.write(answer + "\n")
            sys.stdout.flush()
        elif result.status == NEEDS_HUMAN:
            p = result.pending
            what = (f"approval of {p.tool} {_brief(p.args)}" if p.kind == "approval"
                    else f"an answer: {once_question(p.tool, p.args, p.key)}"
                    if p.kind == "once" else f"an answer: {p.question}")
            self.err.print(f"[magenta]paused, waiting for {escape(what)}[/]")
            if self.stored:
                self.err.print(f"resume with: {escape(resume_command(result.run_id, p.model_dump()))}")
        elif result.status == INTERRUPTED:
            self.err.print("[yellow]interrupted[/]" + (
                f" [dim](go on with: jsonagent resume {result.run_id})[/]" if self.stored else ""))
        else:
            kind = f" ({result.error_kind})" if result.error_kind else ""
            self.err.print(f"[red]{result.status}{kind}:[/] {escape(result.error or '')}")
        s = result.stats
        self.err.print(f"[dim]{_n(len(result.steps), 'step')}, {_n(s.model_calls, 'model call')}, "
                       f"{_n(s.repairs, 'repair')}, {_n(s.reasks, 're-ask')}, "
                       f"{result.usage.prompt_tokens}+{result.usage.completion_tokens} tokens"
                       + ("" if result.usage.cost is None else f", ${result.usage.cost:.4f}")
                       + (f", run {result.run_id}" if self.stored else "") + "[/]")


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _brief(obj: Any) -> str:
    text = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False, default=str)
    return text if len(text) <= _SHOW else text[:_SHOW] + f"… (+{len(text) - _SHOW} chars)"


def _line() -> str:
    """input(), where a Ctrl-C pressed just as the prompt appears still interrupts it.
    CPython looks at signals in a read only when the signal interrupts the read, so one that
    lands between the prompt and the read waited for the next Enter (a chat that would not
    quit). The wait for the line is Python's own; its timeout is what catches a signal that
    lands just before select() itself. Not on Windows, whose select takes no stdin."""
    try:
        waits = sys.platform != "win32" and sys.stdin.isatty()
    except (AttributeError, ValueError):  # no stdin, or a closed one: input() says so
        waits = False
    if waits:
        import select

        while not select.select([sys.stdin], [], [], 0.2)[0]:
            pass
    return input()
