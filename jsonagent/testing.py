"""Test your agents without a network: a model that replays a script."""

from __future__ import annotations

from .models.scripted import ScriptedModel, step

__all__ = ["ScriptedModel", "step"]
