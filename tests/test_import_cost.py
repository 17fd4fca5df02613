"""What `import jsonagent` plus an Agent with the built-in tools must not pay for (issue 28):
jsonschema, the MCP and handler modules, OpenTelemetry, and any pydantic validator (building
the first one makes pydantic scan every installed package for plugins). Timing itself is
bench/overhead.py's; this pins the causes, which do not swing with the machine's load."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_import_and_agent_build_no_validator_and_skip_the_heavy_modules(tmp_path):
    code = textwrap.dedent("""
        import sys
        import jsonagent
        from jsonagent.testing import ScriptedModel
        agent = jsonagent.Agent(model=ScriptedModel([]))
        assert agent.config.observation_role == "user" and agent.config.max_steps == 10
        heavy = ("jsonschema", "opentelemetry", "jsonagent.tools.mcp", "jsonagent.tools.handlers")
        print(sorted(m for m in sys.modules if m.startswith(heavy)))
        from pydantic.plugin import _loader
        print(_loader._plugins)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["[]", "None"]


def test_agent_settings_are_still_validated():
    import pytest

    from jsonagent import Agent
    from jsonagent.testing import ScriptedModel

    with pytest.raises(ValueError):
        Agent(model=ScriptedModel([]), max_steps=0)
