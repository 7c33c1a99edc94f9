"""Records a counter, a gauge and a histogram with the OpenTelemetry SDK and exports them once
to the OTLP/HTTP endpoint given as the first argument, compressed as the second says (gzip or
none), as the service named by the third; fails unless the export succeeded."""

import sys

from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExportResult, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource

results = []


class Checked(OTLPMetricExporter):
    def export(self, *args, **kwargs):
        result = super().export(*args, **kwargs)
        results.append(result)
        return result


endpoint, compression, service = sys.argv[1:4]
exporter = Checked(
    endpoint=endpoint,
    timeout=20,
    compression=Compression.Gzip if compression == "gzip" else Compression.NoCompression,
)
# One export, at shutdown: a long interval keeps the reader from exporting before.
reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
provider = MeterProvider(resource=Resource({"service.name": service}), metric_readers=[reader])
meter = provider.get_meter("bucketd-test")

reads = meter.create_counter("sensor.reads")
reads.add(3, {"room": "kitchen"})
reads.add(4, {"room": "kitchen"})
meter.create_gauge("sensor.temperature").set(21.5, {"room": "kitchen"})
latency = meter.create_histogram("sensor.latency", unit="ms")
for value in (3.0, 12.0, 700.0):
    latency.record(value, {"room": "hall"})

provider.shutdown()
if not results or any(r != MetricExportResult.SUCCESS for r in results):
    sys.exit(f"export failed: {results}")
