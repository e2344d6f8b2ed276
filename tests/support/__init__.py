"""Code shared by several test modules, one module per kind, so that no test module imports
another and the oracles and helpers every user relies on exist once.

- ``waiting``: ``wait_for``, polling a condition instead of sleeping a fixed time.
- ``cluster_plans``: the mixed time/count workload and its WeaveShare plan the cluster tests run.
- ``cluster_oracles``: answers computed without our executors (Spark SQL, numpy) and the
  comparison of two answer tables.
- ``service``: the ``weaveplace serve`` tests' queries, file drops, HTTP calls and oracle.
- ``report_tables``: the HTML report's tables read back by a parser.
- ``configs``: run configurations several test modules load.
"""
