"""The configs shipped with weaveplace (sim/bundled.py): read through ``importlib.resources``
from a checkout, and from a plain (not editable) install, where ``weaveplace quickstart`` runs
in any directory (issue 36: it needed a checkout: ``error: missing
.../site-packages/configs/quickstart.yaml``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

from sim.bundled import MissingConfig, bundled_config

REPO = Path(__file__).resolve().parents[2]
#: what a wheel is built from (README.md is the project's readme; configs/ is package data)
SOURCES = ("placement", "executors", "cluster", "sim", "configs", "pyproject.toml", "README.md")


def test_shipped_configs_are_the_checkouts_configs():
    for name in ("quickstart.yaml", "live_quickstart.yaml", "live_service.yaml"):
        with bundled_config(name) as path:
            assert path.read_bytes() == (REPO / "configs" / name).read_bytes()


def test_a_missing_shipped_config_is_one_line(monkeypatch, capsys):
    import sim.cli
    import sim.cli.tour

    with pytest.raises(MissingConfig, match=r"the shipped config nope\.yaml is missing"):
        with bundled_config("nope.yaml"):
            pass
    real = bundled_config

    def without_live(name):
        return real("nope.yaml" if name == "live_quickstart.yaml" else name)

    monkeypatch.setattr("sim.bundled.bundled_config", without_live)
    monkeypatch.setattr(sys, "argv", ["weaveplace", "quickstart"])
    with pytest.raises(SystemExit) as ex:
        sim.cli.main()
    out = capsys.readouterr()
    assert ex.value.code == 2
    assert out.out.strip().startswith("error: the shipped config nope.yaml is missing")
    assert "Traceback" not in out.out + out.err


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """weaveplace built as a wheel from a copy of the sources and installed (``--no-deps``, not
    editable) into a fresh venv that sees this interpreter's packages (numpy, Ray, Spark, ...)
    through a ``.pth`` line, so nothing is downloaded but the build's own setuptools and wheel
    (from the package index pip is configured with).  Yields the venv's ``bin``."""
    d = tmp_path_factory.mktemp("install")
    src = d / "src"
    src.mkdir()
    for name in SOURCES:
        p = REPO / name
        if p.is_dir():
            shutil.copytree(
                p, src / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__")
            )
        else:
            shutil.copy2(p, src / name)
    venv = d / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    purelib = subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # this interpreter's packages, after the venv's own: the dependencies, not weaveplace (the
    # .pth files there, such as an editable install's finder, are not run from a path line)
    Path(purelib, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "-q", str(src)],
        capture_output=True,
        text=True,
        env=env,
        cwd=d,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    shutil.rmtree(src)  # nothing left to run from but the install
    return venv / "bin"


def _env(tmp: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["NUMBA_CACHE_DIR"] = str(tmp / "numba")  # the installed files' own kernels
    env["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="wp-inst-", dir="/tmp")  # short socket paths
    return env


@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.scenario
def test_quickstart_from_a_plain_install_outside_the_checkout(installed, tmp_path):
    env = _env(tmp_path)
    try:
        where = subprocess.run(
            [installed / "python", "-c", "import sim.bundled as b; print(b.__file__)"],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            check=True,
        ).stdout.strip()
        assert where.startswith(str(installed.parent)) and "site-packages" in where, where
        r = subprocess.run(
            [installed / "weaveplace", "quickstart"],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=1200,
        )
    finally:
        shutil.rmtree(env["RAY_TMPDIR"], ignore_errors=True)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert "quickstart done" in out and "Traceback" not in out, out[-4000:]
    live = tmp_path / "out" / "quickstart" / "live"
    assert (tmp_path / "out" / "quickstart" / "simulation" / "results.csv").is_file()
    assert (live / "answers.parquet").exists() and (live / "metrics.json").is_file()
    assert "estimated vs measured cost per node" in out
