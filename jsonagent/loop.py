"""The agent loop. It orchestrates only: parsing lives in envelope, tools in toolset,
the record in journal."""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any, Callable

from . import journal as ev
from .tools.core import NeedsHuman
from .config import JSON_MODES, AgentConfig
from .envelope import Parsed, ReplyProblem, Step, parse_reply
from .errors import JsonAgentError, ModelError, ResponseFormatRejected, ToolError, UserError
from .models import Model, ModelReply
from .prompt import prompt_style
from .state import Message
from .result import RunResult, StepRecord
from .tools.tool import RunContext, Tool
from .tools.toolset import Toolset

log = logging.getLogger("jsonagent")


class Session:
    """One conversation: its messages, its sandbox and its JSON mode outlive a single run."""

    def __init__(self, model: Model, toolset: Toolset, system: str, config: AgentConfig,
                 ctx: RunContext, sinks: list[Callable[[Any], None]],
                 output_type: type | None = None):
        self.model, self.toolset, self.config, self.ctx = model, toolset, config, ctx
        self.sinks, self.output_type = sinks, output_type
        self.messages: list[Message] = [Message(role="system", content=system)]
        self.style = prompt_style(config.prompt_style)
        self.json_mode = config.json_mode or getattr(model, "default_json_mode", "object")
        self.pending: StepRecord | None = None  # an ask-human call nobody has answered yet
        self.cancel = threading.Event()

    def run(self, text: str) -> RunResult:
        """A user message, or the answer to the pending question, then steps until an end."""
        self.result = RunResult(status="failed", json_mode=self.json_mode)
        self._emit(ev.RunStart(question=text, model=getattr(self.model, "name", "?"),
                               json_mode=self.json_mode, config=self.config.model_dump(),
                               toolset=self.toolset.fingerprint(), tools=self.toolset.names))
        if self.pending is not None:
            self._emit(ev.ToolResult(step=self.pending.index, tool=self.pending.tool,
                                     observation=text, error=False, duration_s=0.0))
            self._observe(self.pending.tool, text)
            self.pending = None
        else:
            self.messages.append(Message(role="user", content=text))
        try:
            return self._loop()
        except NeedsHuman as nh:
            return self._end("needs_human", pending_question=nh.question)
        except KeyboardInterrupt:
            return self._end("interrupted", error="interrupted by the user")
        except JsonAgentError as exc:
            return self._end("failed", error=str(exc))
        except Exception as exc:  # a bug: record the end, then let it surface
            self._end("failed", error=f"internal error: {type(exc).__name__}: {exc}")
            raise

    def _loop(self) -> RunResult:
        for index in range(1, self.config.max_steps + 1):
            if self.cancel.is_set():
                raise KeyboardInterrupt
            t0 = time.perf_counter()
            parsed = self._next_step(index)
            if isinstance(parsed, ReplyProblem):
                return self._end("failed", error=f"no valid reply after "
                                 f"{self.config.max_reasks + 1} tries: {parsed.message}")
            step, tool = parsed.step, self.toolset.get(parsed.step.tool_name)
            record = StepRecord(index=index, thought=step.thought, tool=step.tool_name,
                                args=step.args_list, repairs=parsed.repairs,
                                model_s=time.perf_counter() - t0)
            self.result.steps.append(record)
            self.messages.append(Message(role="assistant", content=step.to_json()))
            self._emit(ev.StepTaken(step=index, thought=step.thought, tool=step.tool_name,
                                    args=step.args_list, repairs=parsed.repairs))
            if not tool.final:
                self._act(tool, step, record, parsed.note)
            elif (answer := self._answer(step, record)) is not None:
                return self._end("completed", answer=answer[0])
        return self._end("max_steps", error=f"stopped after {self.config.max_steps} steps "
                         "without calling " + self.toolset.final.name)

    def _next_step(self, index: int) -> Parsed | ReplyProblem:
        """Ask the model; re-ask with the precise problem until valid or out of budget.
        Failed attempts never enter the history."""
        extra: list[Message] = []
        for attempt in range(self.config.max_reasks + 1):
            reply = self._complete(self.messages + extra, index, attempt)
            parsed = parse_reply(reply.text, self.toolset)
            self.result.stats.repairs += len(parsed.repairs)
            if isinstance(parsed, Parsed):
                return parsed
            self.result.stats.invalid_replies += 1
            if attempt < self.config.max_reasks:
                self.result.stats.reasks += 1
                self._emit(ev.Reask(step=index, attempt=attempt + 1, stage=parsed.stage,
                                    problem=parsed.message))
                extra += [Message(role="assistant", content=reply.text),
                          Message(role="user", content=self.style.reask(parsed, self.toolset))]
        return parsed

    def _complete(self, messages: list[Message], index: int, attempt: int) -> ModelReply:
        while True:
            fmt = self.style.response_format(self.json_mode, self.toolset, self.config.thought_max_chars)
            t0 = time.perf_counter()
            try:
                reply = self.model.complete(
                    self.style.render(messages, self.config.observation_role), fmt,
                    stop=self.style.stop)
            except ResponseFormatRejected as exc:
                self._step_down(str(exc))
                continue
            self.result.stats.model_calls += 1
            self.result.usage += reply.usage
            self._emit(ev.ModelCall(step=index, attempt=attempt, raw=reply.text, usage=reply.usage,
                                    latency_s=round(time.perf_counter() - t0, 4),
                                    json_mode=self.json_mode))
            return reply

    def _step_down(self, reason: str) -> None:
        """The endpoint refused our response_format: use the next weaker mode from now on."""
        if self.json_mode == "prompt":
            raise ModelError(reason)
        old, self.json_mode = self.json_mode, JSON_MODES[JSON_MODES.index(self.json_mode) + 1]
        self.result.json_mode = self.json_mode
        log.warning("endpoint rejected json mode %r (%s); using %r for the rest of the run",
                    old, reason, self.json_mode)
        self._emit(ev.JsonModeChange(old=old, new=self.json_mode, reason=reason))

    def _act(self, tool: Tool, step: Step, record: StepRecord, note: str | None = None) -> None:
        self.ctx.step = record.index
        t0 = time.perf_counter()
        try:
            record.observation = ev.jsonable(tool.invoke(step.args_list, self.ctx))
        except NeedsHuman:
            self.pending = record
            raise
        except UserError:  # a developer's mistake (say, a refused sandbox) ends the run
            raise
        except ToolError as exc:
            record.observation, record.error = {"error": str(exc)}, True
        except (Exception, SystemExit) as exc:  # a tool's bug is an observation, not our crash
            record.observation, record.error = {"error": f"{type(exc).__name__}: {exc}"}, True
        record.tool_s = time.perf_counter() - t0
        self._record(record, " ".join(filter(None, (note, self._repeat_note(record)))) or None)

    def _repeat_note(self, record: StepRecord) -> str | None:
        """Small models loop on a call, or on two in turn, while their thought already holds
        the answer. The observation alone never stops them; a plain word sometimes does
        (3 of 14 loops on the 1.5B in bench/results)."""
        same = [s.index for s in self.result.steps[:-1] if (s.tool, s.args) == (record.tool, record.args)]
        if not same:
            return None
        return (f"This call repeats step {same[-1]} exactly. Do not call it again: use "
                f"the results you have, try something different, or call "
                f"{self.toolset.final.name} with your answer.")

    def _record(self, record: StepRecord, note: str | None = None) -> None:
        self._emit(ev.ToolResult(step=record.index, tool=record.tool, observation=record.observation,
                                 error=record.error, duration_s=round(record.tool_s, 4), note=note))
        self._observe(record.tool, record.observation, note)

    def _answer(self, step: Step, record: StepRecord) -> tuple[Any] | None:
        """The final answer, or None after telling the model why it does not validate."""
        if self.output_type is None:
            args = step.args_list
            return (args["output"] if set(args) == {"output"} else args,)
        from pydantic import TypeAdapter, ValidationError

        try:
            return (TypeAdapter(self.output_type).validate_python(step.args_list),)
        except ValidationError as exc:
            problem = "; ".join(f"/{'/'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            record.observation, record.error = {"error": f"answer rejected: {problem}"}, True
            self._record(record)
            return None

    def _observe(self, tool_name: str, response: Any, note: str | None = None) -> None:
        text = response if isinstance(response, str) else json.dumps(response, ensure_ascii=False)
        limit = self.config.max_observation_chars
        if len(text) > limit:
            response = f"{text[:limit]}… [cut: {len(text) - limit} more characters]"
        message = {"tool_name": tool_name, "response": response} | ({"note": note} if note else {})
        content = json.dumps(message, ensure_ascii=False)
        self.messages.append(Message(role="observation", content=content))

    def _end(self, status: str, answer: Any = None, error: str | None = None,
             pending_question: str | None = None) -> RunResult:
        r = self.result
        r.status, r.answer, r.error, r.pending_question = status, answer, error, pending_question
        self._emit(ev.RunEnd(status=status, answer=ev.jsonable(answer), error=error,
                             pending_question=r.pending_question, usage=r.usage,
                             stats=r.stats.model_dump()))
        return r

    def _emit(self, event: Any) -> None:
        for sink in self.sinks:
            sink(event)

