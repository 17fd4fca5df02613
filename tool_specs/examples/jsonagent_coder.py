"""The coder of the delegation example: an agent whose one tool is the code interpreter, used
as a tool by a writer agent (coder.json says `"handler": {"agent": "jsonagent_coder:coder"}`).

    jsonagent run "How many seconds are there in a leap year? Answer in one sentence." \
        --model local --no-core-tools --tools tool_specs/examples/coder.json

The coder's model is $JSONAGENT_CODER_MODEL, else $JSONAGENT_MODEL, else `local` (the same
local model the writer runs, loaded once more in this process).
"""

import os

from jsonagent import Agent, core_tools

coder = Agent(
    model=os.environ.get("JSONAGENT_CODER_MODEL") or os.environ.get("JSONAGENT_MODEL") or "local",
    tools=[spec for spec in core_tools() if spec.name == "CodeInterpreterTool"],
    max_steps=6,
)
