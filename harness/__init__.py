"""What the tests and the benchmarks both run against: a real Prometheus and Alertmanager on free
loopback ports, the fake NVML library, a webhook sink, and the pytest plugin that checks every
live test carries the `slow` marker. Neither side imports the other's modules."""
