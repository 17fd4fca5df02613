"""End-to-end fixtures: a real GGUF model, served by a real llama.cpp server on 127.0.0.1.

The model is `$JSONAGENT_E2E_MODEL` (a .gguf path) or the catalog's smollm2-135m, pulled
into the real JSONAGENT_HOME beforehand (`jsonagent models pull smollm2-135m`, which
`.ci/e2e.sh` does). The tests skip only when llama-cpp-python is not installed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jsonagent.models import catalog

E2E_MODEL = "smollm2-135m"
# Resolved at collection, before the test-wide conftest points JSONAGENT_HOME at a temp folder.
_PULLED = catalog.CATALOG[E2E_MODEL].path


# Beside three other pytest-xdist workers, llama.cpp's threads wait for each other spinning
# while the machine is busy: one thread each (a test took 491 s with two, 22 s alone).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("JSONAGENT_THREADS", "1")

NOT_INSTALLED = "llama-cpp-python is not installed (pip install 'jsonagent[local,server]')"


@pytest.fixture(scope="session")
def gguf() -> Path:
    configured = os.environ.get("JSONAGENT_E2E_MODEL")
    path = Path(configured) if configured else _PULLED
    if not path.is_file():
        pytest.fail(f"e2e model missing at {path}: run `jsonagent models pull {E2E_MODEL}` "
                    "or set JSONAGENT_E2E_MODEL to a .gguf file", pytrace=False)
    return path


@pytest.fixture(scope="session")
def llama_server(gguf, tmp_path_factory):
    """A real `python -m llama_cpp.server` for the whole session (under xdist, for the worker
    that runs the end-to-end tests); stopped whatever happens."""
    pytest.importorskip("llama_cpp.server.app", reason=NOT_INSTALLED)
    from llama_server import LlamaServer

    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    with LlamaServer(gguf, n_ctx=4096, log=log) as server:
        yield server


def pytest_configure(config):
    config.addinivalue_line("markers", "e2e: needs llama-cpp-python and a real model; deselect with -m 'not e2e'")


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.path).parents:
            item.add_marker(pytest.mark.e2e)
            # a real model on two shared cores: a test may take minutes, not the usual 180 s
            item.add_marker(pytest.mark.timeout(900))
