"""The `jsonagent` command. Each command builds the pieces, calls the library, prints,
and maps known errors to exit codes; the work itself lives in the library."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..calls import once_answer
from ..config import REPLY_TOKENS
from ..status import NEEDS_HUMAN, exit_code
from . import models as cli_models, sandbox as cli_sandbox, serve as cli_serve
from . import evals as cli_evals, sessions as cli_sessions, tools as cli_tools
from .batch import batch
from .exits import debug, guarded
from .command import PlainCommand
from .items import each_item
from .options import (A2aOpt, ApiKeyOpt, BaseUrlOpt, CheckAnswersOpt, ConfirmCodeOpt,
                      FallbackOnInvalidOpt, FallbackOpt, JsonModeOpt, LimitOpt,
                      MaxContextTokensOpt, MaxStepsOpt, McpConfigOpt, McpOpt, McpPrefixOpt,
                      ModelOpt, NoCoreToolsOpt, NoKvCacheOpt, OtelOpt, OutputChoice,
                      ParallelCallsOpt, PromptStyleChoice, PromptStyleOpt, ReplyTokensOpt,
                      RetriesOpt, RunOptions, SandboxChoice, SandboxOpt, StoreOpt,
                      TemperatureOpt, ToolsOpt, interactive, text_arg)
app = typer.Typer(help="A JSON tool-calling agent: one validated JSON object per step.",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  rich_markup_mode=None)  # plain help: rich costs ~90 ms per start
app.add_typer(cli_tools.app, name="tools")
app.add_typer(cli_sandbox.app, name="sandbox")
app.add_typer(cli_models.app, name="models")
app.add_typer(cli_sessions.app, name="sessions")
app.add_typer(cli_evals.app, name="eval")

NoInputOpt = Annotated[bool, typer.Option(
    "--no-input", help="Never prompt; a question for the human ends the run (exit 4).")]
TranscriptOpt = Annotated[Optional[Path], typer.Option(
    "--transcript", metavar="PATH", help="Append every event to this JSONL file as it happens.")]
OutputOpt = Annotated[OutputChoice, typer.Option("--output", "-o", help="text or json.")]


def _print_version(value: bool):
    if value:
        from .. import __version__

        typer.echo(__version__)
        raise typer.Exit(0)


@app.callback()
def _root(debug_flag: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False,
          version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_print_version,
                                                help="Print the version.")] = False):
    if debug_flag:
        debug["on"] = True
    logging.basicConfig(level=logging.DEBUG if debug["on"] else logging.WARNING,
                        format="%(levelname)s: %(message)s", stream=sys.stderr)


SessionOpt = Annotated[Optional[str], typer.Option(
    "--session", "-s", metavar="NAME",
    help="Continue (or start) this named conversation; it is kept across processes.")]
NoStoreOpt = Annotated[bool, typer.Option(
    "--no-store", help="Keep no record of the run.")]


def _agent(opts: RunOptions, display, no_input: bool, transcript: Path | None, no_store: bool,
           store):
    """`store`: an open store, or where one is (--store), or None for the default."""
    from ..store import default_store

    live = interactive(no_input)
    return opts.build_agent(ask_human=display.ask if live else None,
                            approve=display.approve if live else None,
                            on_event=display.event, on_status=display.status,
                            transcript=transcript,
                            store=None if no_store else store or default_store(),
                            deltas=display.live)  # a terminal watches the thought written


def _finish(display, result, output: OutputChoice):
    if output is OutputChoice.json:
        typer.echo(result.model_dump_json(indent=2))
    else:
        display.result(result)
    raise typer.Exit(exit_code(result.status, result.error_kind))


@app.command(cls=PlainCommand)
@guarded
def run(ctx: typer.Context,
        question: Annotated[str, typer.Argument(metavar="QUESTION", help="The task, in plain words.")],
        session: SessionOpt = None, no_input: NoInputOpt = False,
        transcript: TranscriptOpt = None, no_store: NoStoreOpt = False,
        store: StoreOpt = None, output: OutputOpt = OutputChoice.text,
        # the shared run options; RunOptions.of(ctx) gathers them
        tools: ToolsOpt = None, mcp: McpOpt = None, mcp_config: McpConfigOpt = None,
        mcp_prefix: McpPrefixOpt = False, a2a: A2aOpt = None,
        no_core_tools: NoCoreToolsOpt = False,
        model: ModelOpt = None, base_url: BaseUrlOpt = None, api_key: ApiKeyOpt = None,
        fallback: FallbackOpt = None, retries: RetriesOpt = 3,
        fallback_on_invalid: FallbackOnInvalidOpt = None,
        max_steps: MaxStepsOpt = 10, max_context_tokens: MaxContextTokensOpt = None,
        reply_tokens: ReplyTokensOpt = REPLY_TOKENS,
        parallel_calls: ParallelCallsOpt = 1,
        temperature: TemperatureOpt = None,
        json_mode: JsonModeOpt = None, prompt_style: PromptStyleOpt = PromptStyleChoice.json,
        sandbox: SandboxOpt = SandboxChoice.auto, confirm_code: ConfirmCodeOpt = False,
        no_kv_cache: NoKvCacheOpt = False, otel: OtelOpt = False,
        check_answers: CheckAnswersOpt = None,
        limit: LimitOpt = None):
    """Run one task and print its answer.

    The steps are shown live on stderr; the answer alone goes to stdout. Exit codes: 0
    completed, 1 failed, 2 usage or spec error, 3 max_steps, 4 needs_human, 5 stalled, 6
    the model failed for now (rate limited, unavailable, timed out: try again later), 7
    the model failed for good (authentication, bad request, context window, content
    filter), 8 limit_reached (a --limit), 130 interrupted."""
    from .display import Display

    display = Display(quiet=output is OutputChoice.json, stored=not no_store)
    agent = _agent(RunOptions.of(ctx), display, no_input, transcript, no_store, store)
    _finish(display, agent.run(text_arg(question), session=session), output)


@app.command(cls=PlainCommand)
@guarded
def resume(ctx: typer.Context,
           run_id: Annotated[str, typer.Argument(metavar="RUN_ID", help="The paused run.")],
           answer: Annotated[Optional[str], typer.Option(
               "--answer", metavar="TEXT", help="The answer to the run's question.")] = None,
           approve: Annotated[bool, typer.Option("--approve", help="Allow the pending call.")] = False,
           deny: Annotated[bool, typer.Option("--deny", help="Refuse the pending call.")] = False,
           reason: Annotated[Optional[str], typer.Option(
               "--reason", metavar="TEXT", help="Why the call is refused; the model reads it.")] = None,
           item: Annotated[Optional[list[str]], typer.Option(
               "--item", metavar="ID=VALUE", help="For a run that waits for several items: "
               "one item's approve, deny, or answer (its ID, or the index of its call).")] = None,
           no_input: NoInputOpt = False, transcript: TranscriptOpt = None,
           store: StoreOpt = None, output: OutputOpt = OutputChoice.text,
           # the shared run options; RunOptions.of(ctx) gathers them
           tools: ToolsOpt = None, mcp: McpOpt = None, mcp_config: McpConfigOpt = None,
           mcp_prefix: McpPrefixOpt = False, a2a: A2aOpt = None,
           no_core_tools: NoCoreToolsOpt = False,
           model: ModelOpt = None, base_url: BaseUrlOpt = None, api_key: ApiKeyOpt = None,
           fallback: FallbackOpt = None, retries: RetriesOpt = 3,
           fallback_on_invalid: FallbackOnInvalidOpt = None,
           max_steps: MaxStepsOpt = 10, max_context_tokens: MaxContextTokensOpt = None,
           reply_tokens: ReplyTokensOpt = REPLY_TOKENS,
           parallel_calls: ParallelCallsOpt = 1,
           temperature: TemperatureOpt = None,
           json_mode: JsonModeOpt = None, prompt_style: PromptStyleOpt = PromptStyleChoice.json,
           sandbox: SandboxOpt = SandboxChoice.auto, confirm_code: ConfirmCodeOpt = False,
           no_kv_cache: NoKvCacheOpt = False, otel: OtelOpt = False,
           check_answers: CheckAnswersOpt = None,
           limit: LimitOpt = None):
    """Go on with a paused or interrupted run.

    The model and tools the run recorded are used again; --model and --tools override them."""
    from ..errors import ConfigError
    from ..store import open_store
    from .display import Display

    if approve and deny:
        raise ConfigError("--approve and --deny exclude each other")
    opts = RunOptions.of(ctx)
    kept = open_store(store)
    state = kept.load_run(run_id).state
    pending = state.pending if state.status == NEEDS_HUMAN else None
    items = each_item(item or [], pending, reason)
    if pending is not None and pending.items:  # each item is checked, and named, in session.py
        pending = None
    if pending is not None and pending.kind == "question" and answer is None:
        raise ConfigError(f"run {run_id} waits for an answer to {pending.question!r}: give it "
                          "with --answer TEXT")
    if pending is not None and pending.kind == "once" and once_answer(answer) is None:
        raise ConfigError(f"run {run_id} waits for you to say what became of a call of "
                          f"{pending.tool} (key {pending.key}): give --answer happened, again "
                          "or fail (and --reason TEXT if you like)")
    if pending is not None and pending.kind == "approval" and not (approve or deny):
        raise ConfigError(f"run {run_id} waits for an approval of {pending.tool}: add --approve, "
                          "or --deny with an optional --reason TEXT")
    display = Display(quiet=output is OutputChoice.json, stored=True)
    agent = _agent(opts.over(state.origin), display, no_input, transcript, False, kept)
    if "tools" not in opts.given and agent.toolset.fingerprint() != state.toolset:
        raise ConfigError(f"the tools of run {run_id} changed since it was recorded "
                          f"({', '.join(map(str, agent.deps.origin['tools'])) or 'the bundled tools'}); "
                          "pass --tools to choose the tools to resume with")
    decision = True if approve else False if deny else None
    _finish(display, agent.resume(run_id, answer=None if answer is None else text_arg(answer),
                                  approve=decision, reason=reason, items=items), output)


CHAT_HELP = """/help   this text
/reset  start a new conversation (the old one stays stored)
/exit   leave (so do Ctrl-D and Ctrl-C at the prompt)
Ctrl-C during a turn cancels that turn; the conversation goes on."""


@app.command(cls=PlainCommand)
@guarded
def chat(ctx: typer.Context, session: SessionOpt = None, no_input: NoInputOpt = False,
         transcript: TranscriptOpt = None, no_store: NoStoreOpt = False, store: StoreOpt = None,
         # the shared run options; RunOptions.of(ctx) gathers them
         tools: ToolsOpt = None, mcp: McpOpt = None, mcp_config: McpConfigOpt = None,
         mcp_prefix: McpPrefixOpt = False, a2a: A2aOpt = None,
         no_core_tools: NoCoreToolsOpt = False,
         model: ModelOpt = None, base_url: BaseUrlOpt = None, api_key: ApiKeyOpt = None,
         fallback: FallbackOpt = None, retries: RetriesOpt = 3,
         fallback_on_invalid: FallbackOnInvalidOpt = None,
         max_steps: MaxStepsOpt = 10, max_context_tokens: MaxContextTokensOpt = None,
         reply_tokens: ReplyTokensOpt = REPLY_TOKENS,
         parallel_calls: ParallelCallsOpt = 1,
         temperature: TemperatureOpt = None,
         json_mode: JsonModeOpt = None, prompt_style: PromptStyleOpt = PromptStyleChoice.json,
         sandbox: SandboxOpt = SandboxChoice.auto, confirm_code: ConfirmCodeOpt = False,
         no_kv_cache: NoKvCacheOpt = False, otel: OtelOpt = False,
         check_answers: CheckAnswersOpt = None,
         limit: LimitOpt = None):
    """Talk with the agent, turn after turn.

    History and the code interpreter's variables carry over between turns; with --session
    the conversation is kept and goes on in a later chat. Type /help inside for the rest."""
    from .display import Display

    display = Display(stored=not no_store)
    agent = _agent(RunOptions.of(ctx), display, no_input, transcript, no_store, store)
    conversation = agent.session(session)
    try:
        while True:
            pending = conversation.pending
            if pending is not None and pending.items:  # a step of several calls: each item
                items = display.each_item(pending)
                if items is None:
                    break
                display.result(conversation.resume(items=items))
                continue
            if pending is not None and pending.kind == "approval":
                decision = display.approve(pending.tool, pending.args or {})
                if decision is None:
                    break
                display.result(conversation.resume(approve=decision))
                continue
            try:
                text = display.read(display.user_prompt(pending)).strip()
            except (EOFError, KeyboardInterrupt):
                display.err.print()  # the shell's prompt starts on a line of its own
                break
            if text in ("/exit", "/quit", "exit", "quit"):
                break
            if text == "/help":
                display.err.print(CHAT_HELP, highlight=False, markup=False)
            elif text == "/reset":
                conversation.close()
                conversation = agent.session()
                display.err.print("[dim]new conversation[/]")
            elif text:
                result = conversation.run(text_arg(text))
                display.result(result)
    finally:
        conversation.close()
    raise typer.Exit(0)


app.command(cls=PlainCommand)(batch)
app.command(cls=PlainCommand)(cli_serve.serve)


def main() -> None:
    # --debug is honoured wherever it stands, not only before the command.
    if "--debug" in sys.argv[2:]:
        debug["on"] = True
        sys.argv.remove("--debug")
    app()
