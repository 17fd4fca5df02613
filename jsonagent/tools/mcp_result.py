"""What an MCP tool's result becomes for the model: an observation, or a ToolError."""

from __future__ import annotations

import json
from typing import Any

from ..errors import ToolError


def observation(result, server: str, tool: str) -> Any:
    """An MCP CallToolResult as the model sees it: structured content when there is some,
    else the text; images and other binary parts become a short note."""
    parts: list[str] = []
    for block in result.content or []:
        kind = getattr(block, "type", "?")
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            size = len(getattr(block, "data", "") or "") * 3 // 4
            parts.append(f"[{kind} {getattr(block, 'mime_type', '?')}, {size} bytes, not shown]")
        elif kind == "resource_link":
            parts.append(f"[resource {getattr(block, 'uri', '?')}]")
        else:
            parts.append(f"[{kind} content, not shown]")
    text = "\n".join(parts)
    if result.is_error:
        raise ToolError(f"MCP server {server}: {tool} reported an error: "
                        f"{' '.join(text.split())[:500] or 'no detail'}")
    if result.structured_content is not None:
        return result.structured_content
    if len(parts) == 1:
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text
