"""Spark tests: the exactly-once sink on a real SparkSession and PostgreSQL (the ``spark`` extra)."""
