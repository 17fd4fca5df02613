import faulthandler
import socket
import sys

import pytest


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path, monkeypatch):
    """State under a temp home; no keys or endpoints leak in from the developer's shell."""
    monkeypatch.setenv("JSONAGENT_HOME", str(tmp_path / "home"))
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "JSONAGENT_MODEL", "JSONAGENT_DEBUG",
                "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "OTEL_TRACES_EXPORTER", "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
                "TRACEPARENT"):
        monkeypatch.delenv(var, raising=False)


_real_connect = socket.socket.connect


def _loopback_only(self, address):
    host = address[0] if isinstance(address, tuple) else address
    if isinstance(host, str) and self.family in (socket.AF_INET, socket.AF_INET6) \
            and not (host.startswith("127.") or host in ("::1", "localhost")):
        raise OSError(f"tests may not reach the network (tried {host})")
    return _real_connect(self, address)


@pytest.fixture(autouse=True)
def _no_network(monkeypatch):
    monkeypatch.setattr(socket.socket, "connect", _loopback_only)


def pytest_configure(config):
    """A suite started in the background of a non-interactive shell (`python -m pytest &`)
    inherits SIGINT ignored, and so would every process it starts; the Ctrl-C tests send
    SIGINT to their children, so those must start with the default handler. A handler set
    here is reset to the default in an exec'd child, where an ignored one would stay."""
    import signal

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """pytest's own fault handler is off again by now; a native library that crashes while
    the interpreter exits (one CI run ended "Aborted" after every test had passed) should
    leave every thread's Python stack behind, not a bare exit status."""
    faulthandler.enable(file=sys.__stderr__, all_threads=True)


# Tests that must share one pytest-xdist worker, run one after another there, by node id prefix.
# - tests/e2e: a real model keeps both cores busy (llama.cpp's threads spin), so two at once only
#   slow each other (spread over four workers they took 10-40x longer); on one worker they start
#   one llama.cpp server and load each module's model once.
# - the Ray tests: one local Ray cluster at a time.
# - the docs site: its tests share one build of the site (a module fixture), on one worker.
# (xdist's own xdist_group mark does not work with pytest 9.2, whose node ids no longer come
# from the `_nodeid` that xdist rewrites, so the groups are chosen here, by the scheduler.)
XDIST_GROUPS = {
    "tests/e2e/": "e2e",
    "tests/test_batch.py::test_ray_": "ray",
    "tests/test_evals_cli.py::test_an_eval_on_ray": "ray",
    "tests/test_docs_site.py": "docs",
}


def pytest_xdist_make_scheduler(config, log):
    """--dist load, except that each group of XDIST_GROUPS goes to one worker as a whole."""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            for prefix, group in XDIST_GROUPS.items():
                if nodeid.startswith(prefix):
                    return f"group:{group}"
            return nodeid  # every other test alone, as with --dist load

    return GroupScheduling(config, log)


@pytest.fixture(scope="session")
def pg_cluster():
    """One PostgreSQL cluster for the whole run (tests/pg.py); each test takes a database.
    Under pytest-xdist a session is one worker's: each worker that needs it starts its own,
    in its own directory on a port of its own block (tests/ports.py), so none is shared."""
    from pg import Cluster

    cluster = Cluster()
    yield cluster
    cluster.close()


@pytest.fixture
def pg_url(pg_cluster):
    return pg_cluster.database()
