"""What every run of an agent needs, frozen: built once by `Agent`, read by `Session` and
`Loop`. What a run *is* (its messages, steps, usage) stays in `RunState`; what belongs to one
run only (its cancel token, its parent) is in its `RunContext`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from .cancel import CancelToken
    from .config import AgentConfig
    from .hooks import Hooks
    from .models import Capabilities, Model
    from .prompt import PromptStyle
    from .store import Store
    from .tools.toolset import Toolset


@dataclass(frozen=True)
class RunDeps:
    model: Model
    caps: Capabilities
    """What the model declares beyond `complete` (models.capabilities)."""
    toolset: Toolset
    config: AgentConfig
    style: PromptStyle
    system_prompt: str
    hooks: Hooks
    output_type: type | None = None
    ask_human: Callable[[str], Any] | None = None
    """The person, as the user gave it (sync or async); None: nobody can answer now."""
    approve: Callable[[str, dict], Any] | None = None
    on_event: Callable[[Any], None] | None = None
    deltas: bool = False
    """Stream every run's replies: `on_event` and the iterators get the live delta events."""
    transcript: str | Path | None = None
    sandbox_factory: Callable[[], Any] | None = None
    origin: dict[str, Any] = field(default_factory=dict)
    """How a front end built the agent (the CLI's options), recorded with each run."""
    busy_wait_s: float = 5.0
    """How long a new run waits for a busy session before giving up."""
    running: dict[str, CancelToken] = field(default_factory=dict)
    """The cancel token of each run in progress, by run id (`Agent.cancel`)."""
