"""What the local backend reads from a model's chat template: whether it has a tool turn."""

from __future__ import annotations

import pytest

from jsonagent.models.local import TOOL_TURN

QWEN = ('{%- elif message.role == "tool" %}{%- if (loop.index0 == 0) or '
        '(messages[loop.index0 - 1].role != "tool") %}{{- \'<|im_start|>user\' }}{%- endif %}'
        "{{- '\\n<tool_response>\\n' }}{{- message.content }}{{- '\\n</tool_response>' }}")
MISTRAL = "{%- elif message[\"role\"] == \"tool\" %}[TOOL_RESULTS]{{ message.content }}[/TOOL_RESULTS]"
LLAMA3 = "{%- elif message.role == 'tool' or message.role == 'ipython' %}<|start_header_id|>ipython"
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}")
NO_TOOLS = "{% if message['role'] == 'user' %}[INST] {{ message['content'] }} [/INST]{% endif %}"


@pytest.mark.parametrize("template", [QWEN, MISTRAL, LLAMA3])
def test_a_template_with_a_tool_turn_is_recognised(template):
    assert TOOL_TURN.search(template)


@pytest.mark.parametrize("template", [CHATML, NO_TOOLS])
def test_a_template_without_one_is_not(template):
    # generic ChatML would print a bare `tool` role the model never saw in training
    assert not TOOL_TURN.search(template)
