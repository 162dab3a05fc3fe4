"""Outbox events as CloudEvents 1.0 (structured JSON mode), the shape webhook receivers get.

The mapping (docs/architecture.md, "Notifications"): ``id`` is ``icepack-event-<event id>`` (a
receiver deduplicates retries by it), ``source`` ``/icepack``, ``type``
``dev.icepack.<kind>`` where the kind is the outbox topic or ``job.failed``, ``subject`` the
table as ``catalog.namespace.name`` when the event names one, ``time`` the event's commit
time, ``data`` the event's payload with the table, and the ``traceparent`` extension carries
the event's trace. Everything is passed through ``redact`` once more: a payload written before
a secret was configured is masked too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NotRequired, TypedDict, cast

from icepack_core.queue.events import Event
from icepack_core.telemetry.logs import redact
from icepack_core.types import WEBHOOK_JOB_FAILED, JSONObject, Topic

SPEC_VERSION = "1.0"
SOURCE = "/icepack"
TYPE_PREFIX = "dev.icepack."
CONTENT_TYPE = "application/cloudevents+json; charset=utf-8"


@dataclass(frozen=True, slots=True)
class TableName:
    """The table an event names, as the notification shows it."""

    catalog: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.catalog}.{self.namespace}.{self.name}"


def notification_kind(event: Event, chosen: frozenset[str]) -> str | None:
    """What ``event`` is notified as, given the ``chosen`` kinds (ICEPACK_WEBHOOK_TOPICS), or
    None when it is not notified. A failed job's ``job.finished`` is ``job.failed`` when that
    is chosen (the more specific kind wins over ``job.finished``)."""
    if (
        event.topic == Topic.JOB_FINISHED
        and WEBHOOK_JOB_FAILED in chosen
        and isinstance(event.payload, dict)
        and event.payload.get("state") == "failed"
    ):
        return WEBHOOK_JOB_FAILED
    return event.topic if event.topic in chosen else None


class TableJson(TypedDict):
    """The table in a notification's ``data``."""

    catalog: str
    namespace: str
    name: str


class CloudEventData(TypedDict):
    """A notification's ``data``: the outbox event, its table, and its payload as written
    (each topic's own JSON, documented with the topic)."""

    event_id: int
    topic: str
    table_id: int | None
    table: TableJson | None
    payload: JSONObject


class CloudEvent(TypedDict):
    """A CloudEvent 1.0 in structured JSON mode, as webhook receivers get it."""

    specversion: str
    id: str
    source: str
    type: str
    time: str
    datacontenttype: str
    data: CloudEventData
    subject: NotRequired[str]
    traceparent: NotRequired[str]


def cloud_event(event: Event, kind: str, table: TableName | None) -> CloudEvent:
    """The CloudEvent (structured mode) that notifies ``event`` as ``kind``."""
    data: CloudEventData = {
        "event_id": event.id,
        "topic": event.topic,
        "table_id": event.table_id,
        "table": None
        if table is None
        else {"catalog": table.catalog, "namespace": table.namespace, "name": table.name},
        "payload": event.payload,
    }
    body: CloudEvent = {
        "specversion": SPEC_VERSION,
        "id": f"icepack-event-{event.id}",
        "source": SOURCE,
        "type": TYPE_PREFIX + kind,
        "time": event.created_at.isoformat(),
        "datacontenttype": "application/json",
        "data": data,
    }
    if table is not None:
        body["subject"] = str(table)
    if event.traceparent:
        body["traceparent"] = event.traceparent
    return cast(CloudEvent, redact(body))  # the same shape, secrets masked
