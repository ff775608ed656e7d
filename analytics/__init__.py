"""zmqueue analytics: read the segment logs hosts flush, with or without Spark.

Without Spark (tests, tooling)::

    from analytics.reader import read_table
    table = read_table(["/var/lib/zmqueue"], columns=["queue", "record_type", "time"])

With Spark::

    from analytics.session import local_session, register
    spark = local_session(); register(spark)
    df = spark.read.format("zmqueue").load("/var/lib/zmqueue")

This package depends only on the segment format (docs/SEGMENT_FORMAT.md),
never on host internals. Spark is imported only by the modules that need it.
"""
