"""A throwaway PostgreSQL cluster for the tests: Debian's `postgresql` binaries, `initdb` in a
temporary directory as an unprivileged user, on a free port of 127.0.0.1, stopped at the end.

Each test gets a database of its own (`Cluster.database`). The password of the `jsonagent`
role is `secret`, so a wrong one can be tried.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

from ports import free_port  # one port block per xdist worker

USER, PASSWORD = "jsonagent", "secret"


def binary(name: str) -> str:
    found = shutil.which(name) or next(iter(sorted(glob.glob(
        f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None)
    if found is None:
        raise RuntimeError(f"PostgreSQL's {name} is missing: apt-get install postgresql "
                           "(.ci/run does)")
    return found


class Cluster:
    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="jsonagent-pg-"))
        self.data, self.log = self.dir / "data", self.dir / "log"
        self.port = free_port()
        self._as = _unprivileged()
        if self._as:
            uid, gid = self._as
            os.chown(self.dir, uid, gid)
        (self.dir / "pw").write_text(PASSWORD + "\n")
        if self._as:
            os.chown(self.dir / "pw", *self._as)
        self._run(binary("initdb"), "-D", str(self.data), "-U", USER, "--pwfile",
                  str(self.dir / "pw"), "--auth-local=trust", "--auth-host=scram-sha-256",
                  "-E", "UTF8", "--no-sync")
        self.start()

    def _run(self, *cmd: str) -> None:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                             preexec_fn=self._drop if self._as else None)
        if out.returncode != 0:
            raise RuntimeError(f"{cmd[0]} failed: {out.stderr[-2000:]}")

    def _drop(self) -> None:
        uid, gid = self._as
        os.setgid(gid)
        os.setuid(uid)

    def start(self) -> None:
        # fsync and full-page writes only guard against the machine crashing. Commits stay
        # synchronous: with synchronous_commit=off, `restart` (a crash of PostgreSQL) drops
        # commits it had acknowledged, and a run's event vanishes as no real database would
        # let it (bench/chaos.py found one gone)
        options = (f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off "
                   "-c full_page_writes=off -c max_connections=200")
        self._run(binary("pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-o", options,
                  "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run(binary("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self) -> None:
        self._run(binary("pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        self.start()

    def url(self, dbname: str = "postgres", password: str = PASSWORD) -> str:
        return f"postgresql://{USER}:{password}@127.0.0.1:{self.port}/{dbname}"

    def database(self) -> str:
        """A new empty database; its URL."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as db:
            db.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def close(self) -> None:
        try:
            self.stop("immediate")
        except Exception:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)


def _unprivileged() -> tuple[int, int] | None:
    """initdb refuses to run as root: run the cluster as `nobody` then."""
    if os.getuid() != 0:
        return None
    user = pwd.getpwnam("nobody")
    return user.pw_uid, user.pw_gid
