"""The OTLP/HTTP trace receiver of the tests (tests/helpers/otlp.py), fed by the OpenTelemetry
SDK's own OTLP/HTTP exporter: the tree, kinds, attributes, service and status arrive as sent."""

from __future__ import annotations

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

from tests.helpers.otlp import otlp_receiver


def test_spans_the_sdk_exports_arrive_decoded_with_their_tree() -> None:
    with otlp_receiver() as receiver:
        provider = TracerProvider(resource=Resource.create({"service.name": "probe"}))
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(receiver.endpoint)))
        tracer = provider.get_tracer("probe")
        attributes = {"n": 3, "s": "x", "b": True}
        with (
            tracer.start_as_current_span("outer", kind=trace.SpanKind.SERVER) as outer,
            tracer.start_as_current_span(
                "inner", kind=trace.SpanKind.CLIENT, attributes=attributes
            ) as inner,
        ):
            inner.set_status(trace.Status(trace.StatusCode.ERROR, "boom"))
        named = receiver.wait_for_names("outer", "inner")
        provider.shutdown()

    outer_context, inner_context = outer.get_span_context(), inner.get_span_context()
    assert named["outer"].trace_id == format(outer_context.trace_id, "032x")
    assert named["outer"].span_id == format(outer_context.span_id, "016x")
    assert named["outer"].parent_span_id is None
    assert named["outer"].kind == "server" and named["outer"].status == "unset"
    assert named["inner"].trace_id == named["outer"].trace_id
    assert named["inner"].span_id == format(inner_context.span_id, "016x")
    assert named["inner"].parent_span_id == named["outer"].span_id
    assert named["inner"].kind == "client" and named["inner"].status == "error"
    assert named["inner"].attributes == {"n": 3, "s": "x", "b": True}
    assert named["inner"].service == "probe"
    assert named["inner"].traceparent == f"00-{named['inner'].trace_id}-{named['inner'].span_id}-01"


async def test_a_batched_export_is_awaited_from_trio_and_a_missing_span_times_out() -> None:
    with otlp_receiver() as receiver:
        provider = TracerProvider()
        provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(receiver.endpoint), schedule_delay_millis=50)
        )
        provider.get_tracer("probe").start_span("batched").end()
        spans = await receiver.wait_for_async(lambda spans: any(s.name == "batched" for s in spans))
        assert [span.name for span in spans] == ["batched"]
        assert receiver.request_headers[0]["content-type"] == "application/x-protobuf"
        with pytest.raises(TimeoutError, match="batched"):
            receiver.wait_for(lambda spans: len(spans) > 1, within=0.2)
        provider.shutdown()


def test_anything_but_protobuf_on_the_traces_path_is_refused() -> None:
    with otlp_receiver() as receiver:
        with httpx.Client() as client:
            assert client.post(receiver.endpoint, json={}).status_code == 415
            wrong_path = receiver.endpoint.replace("/v1/traces", "/v1/logs")
            headers = {"content-type": "application/x-protobuf"}
            assert client.post(wrong_path, content=b"", headers=headers).status_code == 404
            garbage = client.post(receiver.endpoint, content=b"\xff\xff", headers=headers)
            assert garbage.status_code == 400
        assert receiver.spans == []
