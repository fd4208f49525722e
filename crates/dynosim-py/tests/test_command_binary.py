"""How the command-line entry points find the ``dynosim`` binary (the ``dynosim-bin`` wheel):
without it, or with one of another version, they say so in one line and exit 1."""

import importlib.metadata
import os
import pathlib
import subprocess
import sys

import pytest

import dynamo.replay
import dynosim

HINT = (
    "install it from dynosim's source tree with "
    "pip install --force-reinstall --no-deps ./crates/dynosim-cli"
)


def packages_without_the_binary(tmp_path, binary_version=None):
    """A directory with the ``dynosim`` and ``dynamo`` packages and dynosim's metadata but no
    ``dynosim-bin`` (or only the metadata of a ``dynosim-bin`` of ``binary_version``), to run
    ``python -S`` on (no site-packages) with ``PYTHONPATH`` there."""
    site = tmp_path / "site"
    site.mkdir()
    os.symlink(pathlib.Path(dynosim.__file__).parent, site / "dynosim")
    os.symlink(pathlib.Path(dynamo.replay.__file__).parent.parent, site / "dynamo")
    metadata = next(
        file for file in importlib.metadata.distribution("dynosim").files
        if file.name == "METADATA" and file.parent.name.endswith(".dist-info")
    )
    info = pathlib.Path(importlib.metadata.distribution("dynosim").locate_file(metadata)).parent
    os.symlink(info, site / info.name)
    if binary_version is not None:
        fake = site / f"dynosim_bin-{binary_version}.dist-info"
        fake.mkdir()
        (fake / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: dynosim-bin\nVersion: {binary_version}\n"
        )
    return site


def run_isolated(site, args, cwd):
    return subprocess.run(
        [sys.executable, "-S", *args], cwd=cwd, capture_output=True, text=True, timeout=120,
        env=dict(os.environ, PYTHONPATH=str(site)),
    )


@pytest.mark.parametrize("module", ["dynamo.replay", "dynosim"])
def test_without_the_binary_the_modules_say_so_and_exit_1(module, tmp_path):
    site = packages_without_the_binary(tmp_path)
    result = run_isolated(site, ["-m", module, "--version"], tmp_path)
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""
    assert result.stderr == (
        f"python -m {module}: error: the dynosim binary is not installed (no dynosim-bin "
        f"package): {HINT}\n"
    )


def test_a_binary_of_another_version_is_refused(tmp_path):
    site = packages_without_the_binary(tmp_path, binary_version="9.9.9")
    code = "import sys, dynosim; sys.exit(dynosim.main(['--version']))"
    result = run_isolated(site, ["-c", code], tmp_path)
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""
    assert result.stderr == (
        f"dynosim: error: dynosim-bin 9.9.9 does not match dynosim {dynosim.__version__}: {HINT}\n"
    )
