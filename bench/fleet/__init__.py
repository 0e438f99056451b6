"""Fleet-scale benchmark: dashboards and rule groups on an hour of 1,000 nodes x 8 GPUs.

`python -m bench fleet` (part of `make bench`) or `python -m bench.fleet --nodes 100,1000`:
for each fleet size, synthesize and backfill an hour of data (`data`, its series from `series`
and `values`), backfill the recording rules, start Prometheus on it and time every dashboard
panel's query (`query_timing`); then let a fresh Prometheus scrape the same fleet live (`live`)
with every rule group loaded, and read how long its rule manager takes for each group. Writes
the "Fleet scale" section of BENCHMARKS.md (`report`). `run` drives it all.
"""

from bench.fleet.run import main

__all__ = ["main"]
