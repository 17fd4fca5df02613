"""Where jsonagent keeps its state: `JSONAGENT_HOME`, else the platform's user data folder.

Nothing here creates a directory; callers make what they need, when they need it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def home() -> Path:
    """The jsonagent home: `$JSONAGENT_HOME`, or a per-user data directory for this platform."""
    configured = os.environ.get("JSONAGENT_HOME")
    if configured:
        return Path(configured).expanduser()
    return _platform_data_dir() / "jsonagent"


def _platform_data_dir() -> Path:
    if sys.platform == "win32":
        return Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support"
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
