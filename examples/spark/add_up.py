"""A Spark application: adds up the numbers (one a line) in ``<folder>/<run id>.txt``, the file
the run's container wrote in the folder its first argument names, and prints the total.

Submitted by the `spark` executor as one driver of a standalone master; the run's values reach
it as environment variables (``VERITASK_RUN_ID``, ``VERITASK_LOGICAL_DATE``, ...).
"""

import os
import sys

from pyspark.sql import SparkSession


def main(folder: str) -> None:
    path = os.path.join(folder, os.environ["VERITASK_RUN_ID"] + ".txt")
    spark = SparkSession.builder.appName("add_up").getOrCreate()
    try:
        lines = spark.sparkContext.textFile(path)
        total = lines.filter(lambda line: line.strip()).map(int).sum()
    finally:
        spark.stop()
    print(f"the numbers in {path} add up to {total}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
