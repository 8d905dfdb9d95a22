"""No-op jobs and the optional slow hook that `bench/run.py` measures."""
