"""A model that replays a script: the test double, one more backend (`scripted:FILE`).

Users import it from `jsonagent.testing`."""

from __future__ import annotations

import json
import operator
from pathlib import Path
from typing import Any, Callable, Iterable

from ..errors import ConfigError, ModelError, read_text
from . import Message, ModelReply

Reply = str | dict | ModelReply | BaseException
ReplyFn = Callable[[list[Message], dict | None], Reply]


class ScriptedModel:
    """Replays replies in order, or asks a function for each one.

    A dict reply is sent as its JSON; an exception instance is raised instead of
    replying, to script endpoint failures. Every request is kept in `.requests`.

    By default the replies are a queue that runs on across runs. With `replay=True` (what
    `scripted:FILE` gives), each run picks its reply from the number of model calls it has
    already made, so every run starts at the first reply and a resumed run goes on where
    it stopped, in any process.

    Streamed (`on_delta`), a reply is written in pieces of `chunk` characters, `delay`
    seconds apart, so that tests can watch a step being written.
    """

    default_json_mode = "object"
    streams = True
    writes_ahead = True

    def __init__(self, replies: Iterable[Reply] | ReplyFn = (), name: str = "scripted",
                 replay: bool = False, chunk: int = 16, delay: float = 0.0):
        self.name = name
        self.chunk, self.delay = max(1, int(chunk)), delay
        self._fn = replies if callable(replies) else None
        self._queue: list[Reply] = [] if callable(replies) else [_text(r) for r in replies]
        self._replay = replay
        self._position = 0
        self.stops_on_cancel = self._fn is None
        """Replies from a list come at once; a function of yours may take its time."""
        self.requests: list[dict[str, Any]] = []

    @classmethod
    def from_file(cls, path: str | Path) -> "ScriptedModel":
        """A JSON list of raw reply strings (objects are allowed and sent as JSON), or
        `{"replies": [...], "chunk": 4, "delay": 0.1}` to write them slowly when streamed."""
        if not str(path):
            raise ConfigError("scripted: needs a file, as in scripted:replies.json")
        text = read_text(path, ConfigError, "script")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from None
        writing = {}
        if isinstance(data, dict) and isinstance(data.get("replies"), list):
            writing = {k: data[k] for k in ("chunk", "delay") if isinstance(data.get(k), (int, float))}
            data = data["replies"]
        if not isinstance(data, list):
            raise ConfigError(f"{path}: a script is a JSON list of replies, or an object "
                              "with one under \"replies\"")
        return cls(data, name=f"scripted:{path}", replay=True, **writing)

    def enqueue(self, *replies: Reply) -> None:
        self._queue.extend(_text(r) for r in replies)

    @property
    def hooks(self) -> tuple:
        """A replayed script follows the run it answers: it is a hook of every run."""
        return (self,) if self._replay else ()

    def before_model(self, state) -> None:
        """Before each of a run's model calls: the next reply is the one after the calls
        the run has made (re-asks and summaries included), in this process or another."""
        self._position = state.stats.model_calls

    def complete(self, messages: list[Message], response_format: dict | None, *,
                 stop: list[str] | None = None,
                 on_delta: Callable[[str], None] | None = None) -> ModelReply:
        self.requests.append({"messages": list(messages),
                              "response_format": response_format, "stop": stop})
        if self._fn is not None:
            reply = self._fn(messages, response_format)
        elif self._replay and self._position < len(self._queue):
            reply = self._queue[self._position]
            self._position += 1
        elif not self._replay and self._queue:
            reply = self._queue.pop(0)
        else:
            made = self._position if self._replay else len(self.requests) - 1
            raise ModelError(f"scripted model ran out of replies after {made}")
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, ModelReply):
            self._write(reply.text, on_delta)
            return reply
        text = _text(reply)
        self._write(text, on_delta)
        prompt = sum(map(len, map(str, map(_content, messages)))) // 4
        return ModelReply(text=text, usage={"prompt_tokens": prompt,
                                            "completion_tokens": len(text) // 4})


    def _write(self, text: str, on_delta: Callable[[str], None] | None) -> None:
        if on_delta is None:
            return
        import time

        from ..cancel import current

        cancel = current()
        for at in range(0, len(text), self.chunk):
            if at and self.delay:
                if cancel is not None and cancel.wait(self.delay):
                    cancel.check()
                elif cancel is None:
                    time.sleep(self.delay)
            on_delta(text[at:at + self.chunk])


_content = operator.methodcaller("get", "content", "")


def _text(reply: Reply) -> Reply:
    """A dict reply as the JSON text it is sent as (once, when it is scripted)."""
    return json.dumps(reply) if isinstance(reply, dict) else reply


def step(tool_name: str, args: dict | None = None, thought: str = "") -> dict:
    """A well-formed reply, for scripts."""
    return {"thought": thought, "tool_name": tool_name, "args_list": args or {}}


__all__ = ["ScriptedModel", "step"]
