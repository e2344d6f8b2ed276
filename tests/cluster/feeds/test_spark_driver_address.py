"""Where the Spark driver listens: loopback by default, the host's own address when
``SPARK_LOCAL_IP`` names it (executors of a standalone master on other hosts connect back to
the driver there; on loopback they could not, and the job would hang)."""

from cluster.feeds.parquet import driver_address


def test_driver_on_loopback_unless_spark_local_ip(monkeypatch):
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    assert driver_address() == "127.0.0.1"
    monkeypatch.setenv("SPARK_LOCAL_IP", "")
    assert driver_address() == "127.0.0.1"
    monkeypatch.setenv("SPARK_LOCAL_IP", "10.77.0.10")
    assert driver_address() == "10.77.0.10"
