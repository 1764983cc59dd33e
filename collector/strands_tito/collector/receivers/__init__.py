"""Receivers: the protocols OTLP arrives over. Each only translates; :mod:`..accept` decides.

- :mod:`.http`: OTLP/HTTP on ``/v1/traces`` (protobuf or JSON, gzip or deflate), plus ``/health`` and ``/metrics``.
- :mod:`.grpc`: OTLP/gRPC ``TraceService/Export`` (what the OpenTelemetry Collector's load-balancing exporter speaks).
"""
