"""The DEBS data format and its readers (text and Parquet)."""
