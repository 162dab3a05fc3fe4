"""The CloudEvent mapping (icepack_core.notify.cloudevents): which events are notified as what,
and that a secret anywhere in a payload never reaches the CloudEvent."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from icepack_core.notify.cloudevents import TableName, cloud_event, notification_kind
from icepack_core.queue.events import Event
from icepack_core.telemetry.logs import register_secrets
from icepack_core.types import WEBHOOK_JOB_FAILED, Topic

SECRET = "cloudevent-planted-secret-91b2"
register_secrets([SECRET])
KINDS = [t.value for t in Topic] + [WEBHOOK_JOB_FAILED]
STATES = ["succeeded", "failed", "cancelled"]


def event(topic: str, payload: dict[str, Any], table_id: int | None = 3) -> Event:
    return Event(
        id=41,
        topic=topic,
        table_id=table_id,
        payload=payload,
        traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        created_at=datetime(2026, 11, 27, tzinfo=UTC),
        xid=9,
    )


@given(
    topic=st.sampled_from([t.value for t in Topic]),
    state=st.sampled_from(STATES),
    chosen=st.frozensets(st.sampled_from(KINDS)),
)
def test_an_event_is_notified_as_a_chosen_kind_or_not_at_all(
    topic: str, state: str, chosen: frozenset[str]
) -> None:
    kind = notification_kind(event(topic, {"state": state}), chosen)
    failed_job = topic == Topic.JOB_FINISHED and state == "failed"
    if failed_job and WEBHOOK_JOB_FAILED in chosen:
        assert kind == WEBHOOK_JOB_FAILED
    elif topic in chosen:
        assert kind == topic
    else:
        assert kind is None


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)


@given(
    payload=st.dictionaries(st.text(max_size=8), json_values, max_size=4), where=st.integers(0, 2)
)
def test_a_planted_secret_never_reaches_the_cloudevent(payload: dict[str, Any], where: int) -> None:
    planted: dict[int, dict[str, Any]] = {
        0: {"reason": f"failed with {SECRET} inside"},
        1: {"nested": [SECRET]},
        2: {"error": f"https://user:{SECRET}@host/x"},
    }
    body = cloud_event(event("table.held", {**payload, **planted[where]}), "table.held", None)
    assert SECRET not in json.dumps(body)
    assert body["type"] == "dev.icepack.table.held" and body["id"] == "icepack-event-41"


def test_the_cloudevent_names_the_table_and_carries_the_trace() -> None:
    body = cloud_event(
        event("job.finished", {"state": "failed"}), "job.failed", TableName("lake", "a.b", "t")
    )
    assert body["specversion"] == "1.0" and body["source"] == "/icepack"
    assert body["subject"] == "lake.a.b.t"
    assert body["data"]["table"] == {"catalog": "lake", "namespace": "a.b", "name": "t"}
    assert body["traceparent"].startswith("00-0af765")
    assert body["time"] == "2026-11-27T00:00:00+00:00"
