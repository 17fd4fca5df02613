"""Cancellation as data: one token per run, which the loop, the model call and every tool see.

Nothing is raised into another thread. The loop hands slow work (a model call, a tool call)
to the run's helper thread and waits on the result *or* the token, so a cancel ends the wait
at once, whatever the work is blocked in. The work itself learns of the cancel through the
token: code that starts something slow (a process, a request, a sandbox call) registers how
to stop it with `watching(stop)`, and a Python tool can poll `ctx.cancelled`. A tool that
ignores the token finishes in the background; the run does not wait for it.

    token = CancelToken()
    reply = token.call(model.complete, messages, fmt)   # raises Cancelled once cancelled
    token.cancel()                                        # from any thread
"""

from __future__ import annotations

import contextvars
import os
import logging
import queue
import threading
from contextlib import contextmanager
from inspect import iscoroutinefunction
from typing import Any, Callable, Iterator

from .errors import Cancelled
from .status import Reason

log = logging.getLogger("jsonagent")

# The token of the run whose helper thread is running this code; None elsewhere.
_current: contextvars.ContextVar[CancelToken | None] = contextvars.ContextVar(
    "jsonagent_cancel", default=None)
# Where the helper's current call can hand work back to the waiting (loop) thread.
_caller: contextvars.ContextVar[queue.SimpleQueue | None] = contextvars.ContextVar(
    "jsonagent_caller", default=None)

_CANCELLED, _STOP = object(), object()


class CancelToken:
    """Set once, from any thread; everything registered with `on_cancel` then runs."""

    def __init__(self) -> None:
        self.reason = ""
        self._event = threading.Event()
        self._set = False  # the event's flag, read without a call: checked several times a step
        self._lock = threading.Lock()
        self._callbacks: dict[object, Callable[[], Any]] = {}
        self._helper: _Helper | None = None

    @property
    def cancelled(self) -> bool:
        return self._set

    def cancel(self, reason: str = Reason.CANCELLED) -> None:
        with self._lock:
            if self._event.is_set():
                return
            self.reason = reason
            self._set = True
            self._event.set()
            callbacks, self._callbacks = list(self._callbacks.values()), {}
        for stop in callbacks:
            try:
                stop()
            except Exception:  # one stopper failing must not keep the others from running
                log.exception("stopping work on cancel failed")

    def wait(self, timeout: float | None = None) -> bool:
        return self._event.wait(timeout)

    def on_cancel(self, stop: Callable[[], Any]) -> Callable[[], None]:
        """Run `stop` when the token is cancelled (now, if it is already); returns a function
        that unregisters it."""
        key = object()
        with self._lock:
            if not self._event.is_set():
                self._callbacks[key] = stop
                return lambda: self._unregister(key)
        stop()
        return lambda: None

    @contextmanager
    def watch(self, stop: Callable[[], Any]) -> Iterator[None]:
        """Within the block, a cancel calls `stop` (from the cancelling thread)."""
        remove = self.on_cancel(stop)
        try:
            yield
        finally:
            remove()

    def _unregister(self, key: object) -> None:
        with self._lock:
            self._callbacks.pop(key, None)

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        """A tool's `RunContext` goes through pydantic's validate_call as it is."""
        from pydantic_core import core_schema

        return core_schema.is_instance_schema(cls)

    def check(self) -> None:
        if self._set:
            raise Cancelled(self.reason)

    # -- slow work in the run's helper thread -------------------------------------------------

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """`fn(*args, **kwargs)` in the run's helper thread, waited on here: its result, its
        exception, or Cancelled as soon as the token is cancelled. Ctrl-C while waiting
        cancels the token (so the work is stopped too) and goes on up. `call_here` is for
        work that stops by itself.

        The hand-over costs two thread wake-ups, about 0.25 ms a call on an idle machine:
        more than the rest of a step. So while no other thread could cancel the run (the
        process has only this one, and threads of ours that never cancel), the work runs
        here: Ctrl-C, the one cancel that can come, lands in it at once."""
        if _alone():
            return self.call_here(fn, *args, **kwargs)
        waiting = self._helped(lambda _: fn(*args, **kwargs))
        while True:
            try:
                next(waiting)
            except StopIteration as done:
                return done.value

    def stream(self, fn: Callable[[Callable[[Any], None]], Any]) -> Iterator[Any]:
        """`fn(emit)` in the run's helper thread, as `call` runs it; yields here whatever
        `fn` hands to `emit` (from any thread) as it comes, and returns `fn`'s result. A
        caller that stops iterating cancels the token: nobody is left to wait for the work."""
        try:
            return (yield from self._helped(fn))
        except GeneratorExit:
            self.cancel(Reason.ABANDONED)
            raise

    def _helped(self, fn: Callable[[Callable[[Any], None]], Any]) -> Iterator[Any]:
        self.check()
        if self._helper is None:
            self._helper = _Helper.take()
        inbox: queue.SimpleQueue = queue.SimpleQueue()
        remove = self.on_cancel(lambda: inbox.put(_CANCELLED))
        context = contextvars.copy_context()  # the caller's context vars reach the work
        def emit(item: Any) -> None:  # from the work's thread, or any other it uses
            inbox.put(("item", item))

        self._helper.tasks.put((self, context, fn, emit, inbox))
        over = False  # the work has ended: its helper is free again
        try:
            while True:
                item = inbox.get()
                if item is _CANCELLED:
                    raise Cancelled(self.reason)
                kind, value = item[0], item[1]
                over = kind in ("done", "raise")
                if kind == "done":
                    return value
                if kind == "item":
                    yield value
                    continue
                if kind == "raise":
                    if isinstance(value, KeyboardInterrupt):
                        self.cancel(Reason.BY_USER)
                    raise value
                _serve(item)  # the work asked for something only this thread may do
        except KeyboardInterrupt:
            self.cancel(Reason.BY_USER)
            raise
        finally:
            remove()
            if not over:  # left while the work goes on (a cancel, Ctrl-C, a caller gone):
                helper, self._helper = self._helper, None
                if helper is not None:  # it finishes the abandoned call, then ends
                    helper.tasks.put(_STOP)

    def each(self, works: list[Callable[[], Any]]) -> Iterator[tuple[int, bool, Any]]:
        """Every work at once, each in a thread with this token current (the coroutine
        functions on one event loop); yields `(index, ok, result or exception)` as each ends.
        A cancel raises Cancelled here at once and stops the works (`watching`, a task's
        cancel); so does a caller that stops iterating. What a work hands this thread
        (`on_caller`) is done here."""
        self.check()
        inbox: queue.SimpleQueue = queue.SimpleQueue()
        remove = self.on_cancel(lambda: inbox.put(_CANCELLED))
        waits = [(i, w) for i, w in enumerate(works) if iscoroutinefunction(w)]
        for i, work in enumerate(works):
            if not iscoroutinefunction(work):
                _worker(self, inbox, _ended, inbox, i, work)
        if waits:
            _worker(self, inbox, _awaited, self, inbox, waits)
        try:
            for _ in works:
                while (item := inbox.get()) is not _CANCELLED and item[0] == "run":
                    _serve(item)
                if item is _CANCELLED:
                    raise Cancelled(self.reason)
                yield item
        except (KeyboardInterrupt, GeneratorExit) as exc:  # the caller left: the run ends
            self.cancel(Reason.BY_USER if isinstance(exc, KeyboardInterrupt) else Reason.ABANDONED)
            raise
        finally:
            remove()

    def call_here(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """`fn(*args, **kwargs)` in this thread, for work that stops by itself when the token
        is cancelled (our tool handlers and model backends, which register how through
        `watching`): once cancelled, its outcome is Cancelled, whatever it returned."""
        self.check()
        reset = _current.set(self)
        try:
            result = fn(*args, **kwargs)
        except KeyboardInterrupt:
            self.cancel(Reason.BY_USER)
            raise
        except BaseException:
            self.check()  # when a cancel made it fail, the cancel is what happened
            raise
        finally:
            _current.reset(reset)
        self.check()
        return result

    def close(self) -> None:
        """The run is over: its helper thread waits for another run's work, or ends."""
        helper, self._helper = self._helper, None
        if helper is not None:
            helper.put_back()


class _Helper:
    """A thread that runs one run's slow calls, one at a time, in the caller's context. An
    ended run's helper waits for the next run's (starting a thread costs about 0.2 ms, a
    run of a few fast steps hardly more); one left with an abandoned call never comes back."""

    IDLE_MAX = 4
    idle: list[_Helper] = []

    def __init__(self) -> None:
        self.tasks: queue.SimpleQueue = queue.SimpleQueue()
        quiet(threading.Thread(target=self._work, name="jsonagent-run-helper", daemon=True)).start()

    @classmethod
    def take(cls) -> _Helper:
        try:
            return cls.idle.pop()
        except IndexError:
            return cls()

    def put_back(self) -> None:
        if len(self.idle) < self.IDLE_MAX:
            self.idle.append(self)
        else:
            self.tasks.put(_STOP)

    def _work(self) -> None:
        while (task := self.tasks.get()) is not _STOP:
            token, context, fn, emit, inbox = task
            context.run(_current.set, token)
            context.run(_caller.set, inbox)
            try:
                inbox.put(("done", context.run(fn, emit)))
            except BaseException as exc:  # handed to the waiting thread, which raises it
                inbox.put(("raise", exc))
            del task, token, context, fn, emit, inbox  # an idle helper keeps no run alive


def _worker(token: CancelToken, inbox: queue.SimpleQueue, fn: Callable[..., Any],
            *args: Any) -> None:
    """`fn(*args)` as work of `token`'s run, in a daemon thread of its own: a tool that
    ignores a cancel goes on there, and never holds the process at its exit."""
    def run() -> None:
        _current.set(token)
        _caller.set(inbox)
        fn(*args)

    context = contextvars.copy_context()
    quiet(threading.Thread(target=context.run, args=(run,), daemon=True)).start()


def _ended(inbox: queue.SimpleQueue, i: int, work: Callable[[], Any]) -> None:
    try:
        inbox.put((i, True, work()))
    except BaseException as exc:  # handed to the waiting thread (a task's cancel too)
        inbox.put((i, False, exc))


def _awaited(token: CancelToken, inbox: queue.SimpleQueue, works: list) -> None:
    """The coroutine functions of `each`, as tasks of one event loop."""
    import asyncio

    async def main() -> None:
        loop = asyncio.get_running_loop()
        tasks = [asyncio.ensure_future(w()) for _, w in works]
        for (i, _), task in zip(works, tasks):
            task.add_done_callback(lambda t, i=i: _ended(inbox, i, t.result))
        remove = token.on_cancel(lambda: loop.call_soon_threadsafe(
            lambda: [t.cancel() for t in tasks]))
        try:
            await asyncio.wait(tasks)
        finally:
            remove()

    asyncio.run(main())


def quiet(thread: threading.Thread) -> threading.Thread:
    """Marks a thread of ours that never cancels a run (a run's helper, a loop that sends
    requests): it does not count as one that could (see `CancelToken.call`)."""
    thread.jsonagent_quiet = True
    return thread


def _alone() -> bool:
    here = threading.current_thread()
    return not getattr(here, "jsonagent_quiet", False) and all(
        t is here or getattr(t, "jsonagent_quiet", False) for t in threading.enumerate())


# a forked child has the idle helpers but not their threads
os.register_at_fork(after_in_child=_Helper.idle.clear)


def _serve(item: tuple) -> None:
    _, fn, args, reply = item
    try:
        reply.put(("done", fn(*args)))
    except BaseException as exc:
        reply.put(("raise", exc))
        if not isinstance(exc, Exception):  # Ctrl-C at the prompt ends the run here
            raise


def current() -> CancelToken | None:
    """The token of the run this code works for, inside a call the loop made; else None."""
    return _current.get()


@contextmanager
def watching(stop: Callable[[], Any]) -> Iterator[None]:
    """Within the block, a cancel of the current run calls `stop` (from the cancelling
    thread): kill the process, close the request, cancel the future."""
    token = _current.get()
    if token is None:
        yield
        return
    with token.watch(stop):
        yield


def on_caller(fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)` on the thread that waits for the current call: asking the person reads
    the terminal there, where Ctrl-C lands, and never from a thread a cancel leaves behind."""
    inbox, token = _caller.get(), _current.get()
    if inbox is None or token is None:
        return fn(*args)
    reply: queue.SimpleQueue = queue.SimpleQueue()
    remove = token.on_cancel(lambda: reply.put(_CANCELLED))
    try:
        inbox.put(("run", fn, args, reply))
        item = reply.get()
    finally:
        remove()
    if item is _CANCELLED:
        raise Cancelled(token.reason)
    if item[0] == "raise":
        raise item[1]
    return item[1]


def run_coroutine(coro) -> Any:
    """Run a coroutine to its end from sync code; a cancel of the current run cancels its
    task (so what it opened is closed, as a request's connection) and raises Cancelled."""
    import asyncio

    token = _current.get()

    async def main():
        if token is None:
            return await coro
        loop, task = asyncio.get_running_loop(), asyncio.current_task()
        remove = token.on_cancel(lambda: loop.call_soon_threadsafe(task.cancel))
        try:
            return await coro
        except asyncio.CancelledError:
            if token.cancelled:
                raise Cancelled(token.reason) from None
            raise
        finally:
            remove()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main())
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # called from inside a running loop
        return pool.submit(contextvars.copy_context().run, asyncio.run, main()).result()
