"""What the trainer library and the GPU poller both ship: the metric catalog (every metric's name,
type, unit, labels and producer), the exposition of a registry, the bounded HTTP server that serves
it and its TLS / authentication web config. Standard library and prometheus-client only; the
platform's rules, dashboards and Pulumi program read the catalog from here too."""
