"""A caller's ``traceparent`` cannot raise sampling above the operator's, and no span holds a request (issue 47, L2).

Before, with ``OTEL_TRACES_SAMPLER=parentbased_traceidratio`` at a ratio of 0, anonymous calls
with a sampled ``traceparent`` were all exported (50 of 50) in trace ids they chose, and a
Connect GET's request message was in its HTTP span's URL attributes. A real server (in a
spawned interpreter: a tracer provider is once per process) and a real OTLP receiver; the
server flushes its spans when it stops, so what the receiver holds then is all there is.
"""

from __future__ import annotations

import json
import multiprocessing
import secrets
import urllib.parse
import urllib.request
from collections.abc import Iterator

import grpc
import pytest

from offsetstore.v1 import offset_store_pb2 as pb
from offsetstore.v1 import offset_store_pb2_grpc as pb_grpc
from tests.fixtures import traced_server
from tests.fixtures.otlp_receiver import OtlpReceiver, Received

pytestmark = pytest.mark.slow

CALLS = 20


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    yield receiver
    receiver.stop()


def _sampled_traceparent() -> tuple[str, str]:
    trace_id = secrets.token_hex(16)
    return f"00-{trace_id}-{secrets.token_hex(8)}-01", trace_id


def _calls_with_sampled_traceparents(
    receiver: OtlpReceiver, database_url: str, group_id: str, *, trust_callers: bool
) -> tuple[set[str], list[Received]]:
    """CALLS commits and one Connect GET, each with a sampled traceparent of its own, at a sampling ratio of 0.

    Returns the trace ids sent and every span the server exported until it stopped.
    """
    environment = {
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.endpoint,
        "OTEL_EXPORTER_OTLP_INSECURE": "true",
        "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": "0",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    spawn = multiprocessing.get_context("spawn")
    ready, stop = spawn.Queue(), spawn.Event()
    process = spawn.Process(target=traced_server.run, args=(database_url, environment, ready, stop, trust_callers))
    process.start()
    sent = set()
    try:
        address, http_url = ready.get(timeout=120)
        with grpc.insecure_channel(address) as channel:
            stub = pb_grpc.OffsetStoreServiceStub(channel)
            for n in range(CALLS):
                header, trace_id = _sampled_traceparent()
                sent.add(trace_id)
                stub.CommitOffsets(
                    pb.CommitOffsetsRequest(
                        group_id=group_id, offsets=[pb.OffsetCommit(topic="t", partition=0, offset=n + 1)]
                    ),
                    metadata=[("traceparent", header)],
                    timeout=20,
                )
        header, trace_id = _sampled_traceparent()
        sent.add(trace_id)
        message = urllib.parse.quote(json.dumps({"groupId": group_id}))
        request = urllib.request.Request(
            f"{http_url}/offsetstore.v1.OffsetStoreService/FetchOffsets?encoding=json&message={message}",
            headers={"traceparent": header},
        )
        with urllib.request.urlopen(request, timeout=20) as answer:
            assert json.load(answer)["offsets"][0]["offset"] == str(CALLS)
    finally:
        stop.set()
        process.join(60)
    assert process.exitcode == 0
    return sent, list(receiver.spans)


def test_a_callers_sampled_flag_does_not_override_the_operators_ratio(
    receiver: OtlpReceiver, database_url: str, group_id: str
) -> None:
    sent, spans = _calls_with_sampled_traceparents(receiver, database_url, group_id, trust_callers=False)
    chosen = [s for s in spans if s.trace_id in sent]
    print(f"\nratio 0, {len(sent)} calls with a sampled traceparent: {len(spans)} spans exported")
    assert chosen == [] and spans == []


def test_trusted_callers_keep_their_sampling_and_no_span_holds_a_query_string(
    receiver: OtlpReceiver, database_url: str, group_id: str
) -> None:
    sent, spans = _calls_with_sampled_traceparents(receiver, database_url, group_id, trust_callers=True)
    calls = {s.trace_id for s in spans if s.name.startswith("offsetstore.v1.OffsetStoreService/")}
    print(f"\ntrusted callers: {len(calls)} of {len(sent)} calls' traces exported, {len(spans)} spans")
    assert calls == sent  # the setting honours them, so the receiver did get what was sent
    urls = {k: v for s in spans for k, v in s.attributes.items() if k in ("http.target", "http.url", "url.full")}
    assert urls, "the Connect GET's HTTP span carries its URL"
    assert all("?" not in v and "message" not in v for v in urls.values()), urls
    assert not any(s.attributes.get("url.query") for s in spans)
