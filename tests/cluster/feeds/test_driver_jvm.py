"""How Spark's driver JVM starts (``cluster.feeds.driver_jvm``): where the class archive lives,
when a session maps it, that a real session does map the one ``build`` writes, C1 only."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cluster.feeds import driver_jvm as sa
from cluster.feeds.driver_jvm import JIT, archive_options, driver_conf


def test_archive_file_follows_the_setting(monkeypatch, tmp_path):
    for off in ("off", "0", "no"):
        monkeypatch.setenv(sa.ENV, off)
        assert sa.archive_file() is None and archive_options() == ""
    with pytest.raises(sa.ArchiveError, match="turned off"):
        sa.build()
    monkeypatch.setenv(sa.ENV, str(tmp_path))
    path = sa.archive_file()
    assert path is not None and path.parent == tmp_path and path.suffix == ".jsa"
    monkeypatch.delenv(sa.ENV)
    assert sa.archive_file().parent == sa.DEFAULT_DIR


def test_archive_name_changes_with_the_java_it_was_built_for(monkeypatch, tmp_path):
    """A new JDK gets an archive of its own rather than a stale one."""
    monkeypatch.setenv(sa.ENV, str(tmp_path))
    for name in ("a", "b"):
        java = tmp_path / name / "bin" / "java"
        java.parent.mkdir(parents=True)
        java.write_text("")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "a"))
    first = sa.archive_file()
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "b"))
    assert sa.archive_file() != first
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "none"))
    assert sa.archive_file() is None  # no java there: no archive, no options


def test_options_only_when_the_archive_is_there(monkeypatch, tmp_path):
    monkeypatch.setenv(sa.ENV, str(tmp_path))
    assert archive_options() == ""
    sa.archive_file().write_bytes(b"")
    opts = archive_options()
    assert f"-XX:SharedArchiveFile={sa.archive_file()}" in opts and "-Xshare:auto" in opts


def test_session_options_come_before_the_callers(monkeypatch, tmp_path):
    """Ours are the driver's default options: a caller's own (extra, or default ones) are kept
    and come after them (the JVM takes the last)."""
    monkeypatch.setenv(sa.ENV, str(tmp_path))
    default, extra = "spark.driver.defaultJavaOptions", "spark.driver.extraJavaOptions"
    assert driver_conf({"a": "1"}) == {"a": "1", default: JIT}  # no archive yet: C1 only
    sa.archive_file().write_bytes(b"")
    assert driver_conf({extra: "-Xshare:off"}) == {
        extra: "-Xshare:off",
        default: f"{archive_options()} {JIT}",
    }
    assert driver_conf({default: "-Xmx1g"})[default] == f"{archive_options()} {JIT} -Xmx1g"


_MAPPED = r"""
import sys
from cluster.feeds.parquet import spark_session
# -Xshare:on: the JVM refuses to start unless it maps the archive
spark = spark_session("local[1]", conf={"spark.driver.extraJavaOptions": "-Xshare:on"})
args = list(spark.sparkContext._jvm.java.lang.management.ManagementFactory
            .getRuntimeMXBean().getInputArguments())
print("ARGS", " ".join(args))
spark.stop()
"""


@pytest.mark.slow
@pytest.mark.cluster
def test_a_session_maps_the_archive_build_wrote(monkeypatch, tmp_path):
    """The archive ``build`` writes is one a session's JVM maps: with ``-Xshare:on`` the JVM
    would not start otherwise.  Uses the checkout's archive when ``make`` built it."""
    path = sa.archive_file()
    if path is None or not path.is_file():
        monkeypatch.setenv(sa.ENV, str(tmp_path))
        path = sa.build()
    env = dict(os.environ)
    r = subprocess.run(
        [sys.executable, "-c", _MAPPED],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=sa.REPO,
        env=env,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    line = next(x for x in r.stdout.splitlines() if x.startswith("ARGS "))
    assert f"-XX:SharedArchiveFile={path}" in line and "-Xshare:on" in line and JIT in line
