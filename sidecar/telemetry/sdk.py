"""One process's OpenTelemetry providers, built from ``[telemetry]`` and closed with the process.

:meth:`Telemetry.start` builds a tracer provider only when traces go somewhere (an OTLP
endpoint, or an exporter a test hands in) and a meter provider only when metrics do; with
neither, it builds nothing, :attr:`Telemetry.tracer` is None and the engine takes its
no-tracing path, so an unconfigured sidecar pays nothing for telemetry but a few counters.

Nothing is registered globally (no ``set_tracer_provider``): several sidecars in one test
process each keep their own providers, and closing one leaves the others alone. What is
exported never waits on the caller: spans go through the SDK's batch processor (a bounded
queue on its own thread that drops the newest span when full) and metrics are read by the
SDK's periodic reader on its own thread from observable instruments, whose callbacks only
copy counters (:mod:`sidecar.telemetry.readings`).

:meth:`Telemetry.shutdown` flushes both within ``export_timeout_seconds`` and then gives up:
a collector that is down delays a stop by at most that long.
"""

from __future__ import annotations

import logging
import threading
import uuid
from typing import TYPE_CHECKING, Callable, Iterable, Mapping
from urllib.parse import urlsplit

from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.trace import Tracer

from sidecar.config import TelemetryConfig
from sidecar.telemetry.names import METRICS, SCOPE, Metric

if TYPE_CHECKING:  # the SDK itself is imported only when something is exported (~70 ms at start)
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

log = logging.getLogger("shadowtrial.telemetry")

#: Readings by key (:mod:`sidecar.telemetry.readings`); a key that is absent is not observed.
Readings = Callable[[], Mapping[str, float]]

VERSION = "0.1.0"


class Telemetry:
    """The tracer and meter providers of one process (either may be absent).

    ``process`` names the process in the resource (``shadowtrial.process``: ``sidecar`` or
    ``engine``); each process also gets its own ``service.instance.id``, so counters that
    two processes export under one name add up at the collector."""

    def __init__(self, tracer_provider: TracerProvider | None, meter_provider: MeterProvider | None,
                 *, timeout_s: float = 10.0, sample_ratio: float = 1.0) -> None:
        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        self.timeout_s = timeout_s
        #: Share of cases traced when the gateway did not decide (:func:`sidecar.telemetry.spans.traced`).
        self.sample_ratio = sample_ratio
        self.tracer: Tracer | None = (
            tracer_provider.get_tracer(SCOPE, VERSION) if tracer_provider is not None else None
        )

    @classmethod
    def start(
        cls,
        cfg: TelemetryConfig,
        *,
        process: str,
        span_exporter: SpanExporter | None = None,
        metric_reader: MetricReader | None = None,
    ) -> Telemetry:
        """Providers for ``cfg``. ``span_exporter``/``metric_reader`` replace the OTLP ones (tests:
        the SDK's in-memory exporter and reader); spans handed to a given exporter are exported
        as each ends, not batched, so a test sees them at once."""
        traces = cfg.traces and (span_exporter is not None or bool(cfg.otlp_endpoint))
        metrics = cfg.metrics and (metric_reader is not None or bool(cfg.otlp_endpoint))
        if not (traces or metrics):
            return cls(None, None)
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
        from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased

        resource = Resource.create({
            "service.name": cfg.service_name,
            "service.version": VERSION,
            "service.instance.id": uuid.uuid4().hex,
            "shadowtrial.process": process,
        })
        timeout_ms = int(cfg.export_timeout_seconds * 1000)
        tracer_provider = None
        if traces:
            tracer_provider = TracerProvider(
                # Whether a case is traced is decided before its span is started
                # (sidecar.telemetry.spans.traced); the sampler follows that decision.
                sampler=ParentBased(root=ALWAYS_ON),
                resource=resource,
                shutdown_on_exit=False,
            )
            if span_exporter is not None:
                tracer_provider.add_span_processor(SimpleSpanProcessor(span_exporter))
            else:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

                exporter = OTLPSpanExporter(endpoint=_signal_url(cfg.otlp_endpoint, "traces"),
                                            timeout=cfg.export_timeout_seconds)
                tracer_provider.add_span_processor(BatchSpanProcessor(exporter, export_timeout_millis=timeout_ms))
        meter_provider = None
        if metrics:
            if metric_reader is None:
                from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

                metric_reader = PeriodicExportingMetricReader(
                    OTLPMetricExporter(endpoint=_signal_url(cfg.otlp_endpoint, "metrics"),
                                       timeout=cfg.export_timeout_seconds),
                    export_interval_millis=cfg.export_interval_seconds * 1000,
                    export_timeout_millis=timeout_ms,
                )
            meter_provider = MeterProvider(metric_readers=[metric_reader], resource=resource, shutdown_on_exit=False)
        if cfg.otlp_endpoint:
            where = urlsplit(cfg.otlp_endpoint)  # the host only: a URL may carry credentials
            log.info("telemetry: OTLP/HTTP export to %s://%s (traces %s, metrics %s)", where.scheme, where.hostname,
                     "on" if traces else "off", "on" if metrics else "off")
        return cls(tracer_provider, meter_provider, timeout_s=cfg.export_timeout_seconds, sample_ratio=cfg.sample_ratio)

    def observe(self, readings: Readings) -> None:
        """Register every metric of :data:`~sidecar.telemetry.names.METRICS` as an observable
        instrument reading ``readings`` (called on the reader's thread at each collection)."""
        if self.meter_provider is None:
            return
        meter = self.meter_provider.get_meter(SCOPE, VERSION)
        for metric in METRICS:
            callback = _callback(metric, readings)
            if metric.kind == "counter":
                meter.create_observable_counter(metric.otel, [callback], unit=metric.unit, description=metric.help)
            else:
                meter.create_observable_gauge(metric.otel, [callback], unit=metric.unit, description=metric.help)

    def shutdown(self) -> None:
        """Flush and close, waiting at most ``timeout_s`` (blocking: call off the event loop)."""
        tracers, meters = self.tracer_provider, self.meter_provider
        if tracers is None and meters is None:
            return

        def close() -> None:
            if tracers is not None:
                _quietly(tracers.shutdown)
            if meters is not None:
                _quietly(lambda: meters.shutdown(timeout_millis=self.timeout_s * 1000))

        worker = threading.Thread(target=close, name="shadowtrial-telemetry-close", daemon=True)
        worker.start()
        worker.join(self.timeout_s + 1.0)
        if worker.is_alive():
            log.warning("telemetry did not flush within %.0f s; what was left is dropped", self.timeout_s)


def _quietly(shutdown: Callable[[], object]) -> None:
    try:
        shutdown()
    except Exception as exc:  # an exporter's failure must not fail a stop
        log.warning("telemetry shutdown failed (%s)", type(exc).__name__)


def _signal_url(base: str, signal: str) -> str:
    """``<base>/v1/<signal>``, as OTLP/HTTP builds it from ``OTEL_EXPORTER_OTLP_ENDPOINT``."""
    return f"{base.rstrip('/')}/v1/{signal}"


def _callback(metric: Metric, readings: Readings) -> Callable[[CallbackOptions], Iterable[Observation]]:
    def observe(_options: CallbackOptions) -> Iterable[Observation]:
        values = readings()
        return [Observation(values[key], dict(labels)) for labels, key in metric.series if key in values]

    return observe
