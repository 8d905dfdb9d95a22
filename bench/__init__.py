"""Benchmarks of awa-django (issue 2 "Speed"); run `python bench/run.py`."""
