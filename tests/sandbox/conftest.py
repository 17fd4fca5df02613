"""Fixtures for the sandbox suite: real worker processes, small limits, fast timeouts.

Every adversarial test asserts the outcome for the isolation level actually in
force (read from `sb.isolation`), then that the next `run` still works.
"""

from __future__ import annotations

import pytest

from jsonagent.bundled import sandbox

Limits, Sandbox = sandbox.Limits, sandbox.Sandbox

SMALL = Limits(disk_mb=32, max_files=500, nproc=32, nofile=128, grace_s=0.3)


@pytest.fixture
def sb():
    box = Sandbox(timeout=5, memory_mb=256, limits=SMALL)
    yield box
    box.close()


@pytest.fixture
def make_sandbox():
    boxes = []

    def make(**kwargs):
        kwargs.setdefault("limits", SMALL)
        kwargs.setdefault("memory_mb", 256)
        box = Sandbox(**kwargs)
        boxes.append(box)
        return box

    yield make
    for box in boxes:
        box.close()
