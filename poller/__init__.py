"""The NVML GPU poller: a lean Prometheus exporter for the `ml_gpu_*` metrics of the catalog.

Run it with `python -m poller --listen HOST:PORT`. Module map:
  settings       flags and environment, validated into `PollerSettings`
  cli            `main()`: settings, then the server
  nvml_source    NVML access: init with backoff, one pass over every GPU, faults contained
  nvml_fields    the row of an NVML reading (call, options, C type, scale, metric), declared on its
                 GpuSample attribute, and the table read back from them
  nvml_calls     the per-pass NVML calls derived from it, bound once per GPU to one buffer
  xid_events     the background thread that counts XID events from NVML's event API
  error_counters counters that live across passes (XID, GPU errors, collection failures)
  samples        the values one pass produces (`GpuSample` with its NVML rows, `GpuIdentity`,
                 `PassResult`) and `NVML_FIELDS`
  shared_pass    `SharedPass` (one pass at a time, minimum interval)
  metrics_page   the fast text-format writer the HTTP server uses for `/metrics`
  exported_metrics which catalog metric each NVML reading becomes
  server         HTTP server (`/metrics`, `/healthz`), SIGTERM handling
  healthcheck    the container HEALTHCHECK probe
"""
