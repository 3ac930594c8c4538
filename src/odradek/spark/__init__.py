"""Odradek's PySpark data source: read and write Kafka topics from Spark, no JVM jar.

    from odradek.spark import register
    register(spark)                         # the format "odradek"
    spark.readStream.format("odradek").option("kafka.bootstrap.servers", ...)...

Built on PySpark's Python Data Source API (pyspark >= 4.2, pyarrow) and
Odradek's own client, so it works against Odradek and any Kafka-compatible
broker. Options, schema and semantics: docs/spark.md.
"""

from __future__ import annotations

from typing import Any

from odradek.extras import imports_of

with imports_of("spark", "odradek.spark"):  # without pyspark: one line naming the extra
    from pyspark.sql.datasource import DataSource

    from .arrow import schema_ddl
    from .options import OptionError, ReadOptions, WriteOptions, lower, parse_bool

FORMAT = "odradek"

__all__ = ["FORMAT", "DefaultSource", "OdradekDataSource", "OptionError", "register"]


class OdradekDataSource(DataSource):
    """The ``odradek`` format: batch and streaming reader, batch and streaming writer."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return schema_ddl(parse_bool(lower(self.options), "includeHeaders", False))

    def reader(self, schema: Any) -> Any:
        from .reader import OdradekBatchReader

        return OdradekBatchReader(ReadOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: Any) -> Any:
        from .reader import OdradekStreamReader

        return OdradekStreamReader(ReadOptions.parse(self.options, streaming=True))

    def writer(self, schema: Any, overwrite: bool) -> Any:
        from .writer import OdradekBatchWriter

        return OdradekBatchWriter(WriteOptions.parse(self.options), schema)

    def streamWriter(self, schema: Any, overwrite: bool) -> Any:
        from .writer import OdradekStreamWriter

        return OdradekStreamWriter(WriteOptions.parse(self.options), schema)


DefaultSource = OdradekDataSource


def register(spark: Any) -> None:
    """Register the ``odradek`` format with a SparkSession."""
    spark.dataSource.register(OdradekDataSource)
