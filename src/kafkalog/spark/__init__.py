"""Layer 4: the PySpark data source ``kafkalog`` (needs the ``spark`` extra).

``kafkalog.spark.register(spark)`` makes ``spark.read.format("kafkalog")`` read Kafka log
directories with the schema and options of Spark's own Kafka source.
"""

from kafkalog.spark.source import KafkaLogDataSource, path_in_use, register

__all__ = ["KafkaLogDataSource", "path_in_use", "register"]
