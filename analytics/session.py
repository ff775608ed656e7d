"""SparkSession helpers: a fast local session, or a cluster via ``master``."""

from __future__ import annotations

import os
import sys
from typing import Any

LOCAL_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.enabled": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.driver.memory": "2g",
}


def register(spark: Any) -> None:
    """Make ``spark.read.format("zmqueue")`` available on this session."""
    from analytics.datasource import ZmqueueDataSource

    spark.dataSource.register(ZmqueueDataSource)


def get_session(master: str | None = None, app_name: str = "zmqueue-analytics",
                conf: dict[str, str] | None = None) -> Any:
    """A SparkSession with the zmqueue source registered.

    ``master=None`` means ``local[2]`` with quiet fast settings, its Python
    workers running this interpreter (unless ``PYSPARK_PYTHON`` says
    otherwise); a URL
    (``spark://host:7077``, ``yarn``...) runs the same jobs on that cluster,
    whose Python workers must have this package installed.
    """
    from pyspark.sql import SparkSession

    local = master is None or master.startswith("local")
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        # the Python workers run this interpreter (its packages: pyarrow, lz4),
        # not whatever `python3` comes first on PATH (an un-activated venv);
        # set before the JVM starts, which inherits it
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name).master(master or "local[2]")
    settings = dict(LOCAL_CONF) if local else {"spark.sql.session.timeZone": "UTC"}
    settings.update(conf or {})
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
