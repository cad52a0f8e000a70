"""OpenTelemetry tracing across the services: off by default, on by configuration.

With `BURACO_TRACING_ENABLED=true` a service traces every call it serves (one SERVER span per
call, health checks and reflection excepted) and every call it makes on the channels of
`services.client.channels` (one CLIENT span, whose context travels to the callee in the W3C
`traceparent` metadata), so a gateway's call and everything it causes downstream form one trace.
Spans go to an OpenTelemetry collector over OTLP/gRPC, in batches. Inside a span, every JSON log
line also carries `trace_id` and `span_id`.

Settings (docs/operations.md, "Tracing"): `BURACO_TRACING_ENABLED` (`false`) is ours; the rest
are the OpenTelemetry SDK's own standard variables, read by the SDK:

    OTEL_EXPORTER_OTLP_ENDPOINT         http://localhost:4317   the collector (OTLP over gRPC)
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT  (the above)             for traces only
    OTEL_EXPORTER_OTLP_HEADERS, OTEL_EXPORTER_OTLP_TIMEOUT, OTEL_EXPORTER_OTLP_CERTIFICATE, ...
    OTEL_TRACES_SAMPLER                 parentbased_always_on   e.g. parentbased_traceidratio
    OTEL_TRACES_SAMPLER_ARG             (none)                  the ratio, e.g. 0.05
    OTEL_SERVICE_NAME                   buraco-<service>        service.name of the spans
    OTEL_RESOURCE_ATTRIBUTES            (none)                  e.g. k8s.pod.name=...,deployment.environment=prod
    OTEL_PROPAGATORS                    tracecontext,baggage    how the context travels

The server boot (`services.common.server.serve`) calls `provider_from_env`; `Server` and
`client.Clients` take the provider (None: tracing off, no interceptor at all, no cost). Tests pass
their own provider (e.g. with an in-memory exporter) to `Server`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from services.common.config import TRACING_ENABLED

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

ENABLED_VARIABLE = TRACING_ENABLED.name

#: Calls that are never traced: the kubelet's probes and reflection would drown the real traffic.
UNTRACED_SERVICE_PREFIXES = ("grpc.health.v1.", "grpc.reflection.")


def enabled(env: Mapping[str, str] | None = None) -> bool:
    """Whether BURACO_TRACING_ENABLED asks for tracing (ConfigError naming it on a bad value)."""
    return TRACING_ENABLED.read(env)


def provider_from_env(service: str, env: Mapping[str, str] | None = None) -> TracerProvider | None:
    """The tracer provider a service process runs with: None when tracing is off; else spans
    batched to the OTLP/gRPC exporter configured by the SDK's OTEL_* variables."""
    if not enabled(env):
        return None
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = new_provider(service, env)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    install_log_correlation()
    return provider


def new_provider(service: str, env: Mapping[str, str] | None = None) -> TracerProvider:
    """A provider naming the service (OTEL_SERVICE_NAME wins); the sampler comes from the SDK's
    OTEL_TRACES_SAMPLER (default: parent-based, always on). No exporter: add a span processor."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    source = os.environ if env is None else env
    name = source.get("OTEL_SERVICE_NAME") or f"buraco-{service.replace('_', '-')}"
    # Resource.create also merges OTEL_RESOURCE_ATTRIBUTES; the attributes given here win.
    resource = Resource.create({"service.name": name, "service.namespace": "buraco"})
    return TracerProvider(resource=resource)


def _traced(details: Any) -> bool:
    method = str(getattr(details, "method", "") or "").lstrip("/")
    return not method.startswith(UNTRACED_SERVICE_PREFIXES)


def server_interceptors(provider: TracerProvider | None) -> list[Any]:
    """The server interceptor that opens a SERVER span per call, continuing the caller's trace
    (first in the chain, so the span covers the whole pipeline); [] when tracing is off."""
    if provider is None:
        return []
    from opentelemetry.instrumentation.grpc import aio_server_interceptor

    return [aio_server_interceptor(tracer_provider=provider, filter_=_traced)]  # type: ignore[no-untyped-call]


def client_interceptors(provider: TracerProvider | None) -> list[Any]:
    """Channel interceptors that open a CLIENT span per outbound call and send its context in
    the call's metadata; [] when tracing is off."""
    if provider is None:
        return []
    from opentelemetry.instrumentation.grpc import aio_client_interceptors

    return list(aio_client_interceptors(tracer_provider=provider, filter_=_traced))  # type: ignore[no-untyped-call]


def shutdown(provider: TracerProvider | None) -> None:
    """Flush the spans still batched and stop exporting (at the end of the process)."""
    if provider is not None:
        provider.shutdown()


class _TraceIds(logging.Filter):
    """Adds the current span's `trace_id` and `span_id` to the record's JSON fields."""

    def filter(self, record: logging.LogRecord) -> bool:
        from opentelemetry import trace

        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            fields = getattr(record, "fields", None)
            record.fields = {
                **(fields if isinstance(fields, dict) else {}),
                "trace_id": format(context.trace_id, "032x"),
                "span_id": format(context.span_id, "016x"),
            }
        return True


def install_log_correlation() -> None:
    """Put the trace and span ids in the log lines written inside a span (by the handlers that
    `services.common.logs.configure` installed on the root logger)."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, _TraceIds) for f in handler.filters):
            handler.addFilter(_TraceIds())
