"""Aggregation of result files into summaries, tables and charts. Never loads a model."""
