"""Run one Flink SQL statement set from a JSON spec and print its timing as one JSON line.

    FLINK_PYTHON sim/bench/flink_job.py SPEC.json

Why a script of its own, run by path with Flink's Python: apache-flink pins pandas < 2.3 and
pyarrow < 21, which weaveplace's own pins exclude, so PyFlink lives in an environment of its
own (``pip install --group flink``, README) and this file imports nothing but the standard
library and PyFlink.  ``weaveplace bench flink`` (``sim/bench/flink.py``) writes the spec
(statements from ``sim/bench/flink_sql.py``) and runs this in a child process, whose wall
time from launch to exit is Flink's whole process.

Spec: ``parallelism``, ``ddl`` (statements executed first), ``inserts`` (run as one statement
set, one job), ``config`` (extra Flink options).  Prints ``{"net_runtime_ms": ...,
"job_id": ..., "submit_to_end_s": ...}``: the job's execution time as Flink reports it
(``JobExecutionResult.getNetRuntime``) and the seconds from submission to the job's end.
"""

from __future__ import annotations

import json
import sys
import time


def main(argv: list[str]) -> int:
    spec = json.loads(open(argv[1]).read())
    from pyflink.common import Configuration
    from pyflink.table import EnvironmentSettings, TableEnvironment

    # given at creation, so that the local cluster the job runs on gets them too (its
    # managed memory: the window operators' buffers)
    conf = Configuration()
    conf.set_string("parallelism.default", str(spec["parallelism"]))
    conf.set_string("table.local-time-zone", "UTC")  # windows aligned at the epoch (flink_sql)
    for k, v in spec.get("config", {}).items():
        conf.set_string(k, str(v))
    settings = EnvironmentSettings.new_instance().in_streaming_mode().with_configuration(conf)
    t_env = TableEnvironment.create(settings.build())
    for stmt in spec["ddl"]:
        t_env.execute_sql(stmt)
    stmts = t_env.create_statement_set()
    for stmt in spec["inserts"]:
        stmts.add_insert_sql(stmt)
    t0 = time.perf_counter()
    result = stmts.execute()
    client = result.get_job_client()
    res = client.get_job_execution_result().result()
    out = {
        "job_id": str(client.get_job_id()),
        "net_runtime_ms": res.get_net_runtime(),
        "submit_to_end_s": time.perf_counter() - t0,
    }
    print("FLINK_JOB " + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
