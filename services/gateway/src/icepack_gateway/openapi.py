"""The OpenAPI 3.1 document served at ``/openapi.json``, written by hand beside the routes.

A test walks the app's routes and this document both ways, so neither can drift from the other.
Request bodies with a pydantic model use that model's JSON Schema.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from icepack_gateway.api_holds import HoldReleaseIn
from icepack_gateway.api_jobs import JobIn
from icepack_gateway.api_policies import PATHS as POLICY_PATHS
from icepack_gateway.api_policies import SimulateIn
from icepack_gateway.jsonutil import ApiResponse
from icepack_gateway.policy_models import PolicyType, config_schemas

OBJ: dict[str, Any] = {"type": "object"}
REFUSED = "refused: table held or opted out, overlapping location, or nothing recommended"


def ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def page_of(name: str) -> dict[str, Any]:
    return {"type": "object", "required": ["items", "next_cursor"], "properties": {
        "items": {"type": "array", "items": ref(name)},
        "next_cursor": {"type": ["string", "null"],
                        "description": "pass as ?cursor= for the next page; null at the end"}}}


def param(name: str, where: str = "query", schema: dict[str, Any] | None = None,
          description: str = "") -> dict[str, Any]:
    return {"name": name, "in": where, "required": where == "path",
            "schema": schema or {"type": "string"}, "description": description}


def error(description: str) -> dict[str, Any]:
    return {"description": description,
            "content": {"application/json": {"schema": ref("Error")}}}


def ok(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def op(summary: str, response: dict[str, Any], *, params: list[dict[str, Any]] | None = None,
       body: dict[str, Any] | None = None, write: bool = False, status: str = "200",
       extra: dict[str, Any] | None = None) -> dict[str, Any]:
    responses: dict[str, Any] = {status: response, **(extra or {})}
    responses.setdefault("422", error("a parameter is invalid (the message names it)"))
    if any(p.get("name") == "cursor" for p in params or []):
        responses["400"] = error("the cursor is not one this listing returned (INVALID_CURSOR)")
    if body is not None:
        responses["413"] = error("the body is over ICEPACK_GATEWAY_MAX_BODY_BYTES "
                                 "(BODY_TOO_LARGE)")
    else:
        responses["401"] = error("ICEPACK_GATEWAY_READ_AUTH=true and no valid token "
                                 "(AUTH_REQUIRED, INVALID_TOKEN)")
    operation: dict[str, Any] = {"summary": summary, "parameters": params or [],
                                 "responses": responses}
    if body is not None:
        operation["requestBody"] = {"required": True,
                                    "content": {"application/json": {"schema": body}}}
    if write:
        operation["security"] = [{"bearer": []}]
        responses["401"] = error("no token, or a token that matches none (AUTH_REQUIRED, "
                                 "INVALID_TOKEN)")
        responses["403"] = error("the token was revoked (TOKEN_REVOKED)")
    return operation


DEFS: dict[str, Any] = {}


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """A pydantic model's JSON Schema, its nested models hoisted into components."""
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
    DEFS.update(schema.pop("$defs", {}))
    return schema


PAGE = [param("limit", schema={"type": "integer", "minimum": 1, "maximum": 500}),
        param("cursor", description="opaque; from next_cursor")]
TABLE_PATH = [param("catalog", "path"), param("namespace", "path"), param("table", "path")]
TABLE_404 = {"404": error("unknown table (TABLE_NOT_FOUND)")}
T = "/tables/{catalog}/{namespace}/{table}"
TABLE_FILTER = [param("table", description="CATALOG.NAMESPACE.TABLE"),
                param("table_id", schema={"type": "integer", "minimum": 1})]

SCHEMAS: dict[str, Any] = {
    "Error": {"type": "object", "required": ["code", "message"], "properties": {
        "code": {"type": "string", "description": "stable, e.g. TABLE_NOT_FOUND"},
        "message": {"type": "string"}, "detail": {}}},
    "TableRef": {"type": ["object", "null"], "properties": {
        "id": {"type": "integer"}, "catalog": {"type": "string"},
        "namespace": {"type": "string"}, "name": {"type": "string"}}},
    "Issue": {"type": "object", "properties": {
        "code": {"type": "string"}, "severity": {"enum": ["warning", "critical"]},
        "value": {"type": ["number", "null"]}, "threshold": {"type": ["number", "null"]},
        "message": {"type": "string"}}},
    "TableListItem": {"type": "object", "properties": {
        "id": {"type": "integer"}, "catalog": {"type": "string"},
        "namespace": {"type": "string"}, "name": {"type": "string"},
        "health": {"enum": ["healthy", "warning", "critical", "unknown"]},
        "score": {"type": ["integer", "null"]}, "issues": {"type": "array", "items": OBJ},
        "metrics": {"type": ["object", "null"]}}},
    "Health": {"type": "object", "properties": {
        "health": {"type": "string"}, "score": {"type": "integer"},
        "issues": {"type": "array", "items": ref("Issue")},
        "assessed_at": {"type": "string", "format": "date-time"}}},
    "Status": {"type": "object", "properties": {
        "inspected_at": {"type": "string", "format": "date-time"},
        "status": {"type": "object", "description": "the TableStatus contract "
                                                    "(docs/table-status.md)"}}},
    "Recommendation": {"type": "object", "properties": {
        "id": {"type": "integer"},
        "actions": {"type": "array", "description": "what the planner proposes, in run order",
                    "items": {"type": "object", "properties": {
                        "action": {"type": "string"}, "reason": {"type": "string"},
                        "params": OBJ, "estimated_benefit": OBJ}}},
        "skipped": {"type": "array", "description": "what it did not propose, and why",
                    "items": {"type": "object", "properties": {
                        "action": {"type": "string"}, "reason": {"type": "string"}}}},
        "job_id": {"type": ["integer", "null"]},
        "created_at": {"type": "string", "format": "date-time"}}},
    "TableDetail": {"type": "object", "properties": {
        "table": OBJ, "health": {"anyOf": [ref("Health"), {"type": "null"}]},
        "status": {"anyOf": [ref("Status"), {"type": "null"}]},
        "recommendation": {"anyOf": [ref("Recommendation"), {"type": "null"}]},
        "latest_job": {"anyOf": [ref("Job"), {"type": "null"}]}}},
    "StatusPoint": {"type": "object", "properties": {
        k: {"type": ["integer", "null"]} for k in (
            "id", "data_file_count", "data_file_bytes", "record_count", "small_file_count",
            "snapshot_count", "manifest_count", "delete_file_count")}},
    "JobAction": {"type": "object", "properties": {
        "action": {"type": "string"}, "procedure": {"type": ["string", "null"]},
        "sql_text": {"type": ["string", "null"]},
        "state": {"enum": ["succeeded", "failed", "skipped"]}, "output": OBJ,
        "impact": {"type": "object", "description": "{before: {...}, after: {...}} metrics"},
        "duration_ms": {"type": "integer"}}},
    "Job": {"type": "object", "properties": {
        "id": {"type": "integer"},
        "state": {"enum": ["queued", "running", "succeeded", "failed", "cancelled"]},
        "table": ref("TableRef"), "actions": {"type": "array", "items": OBJ},
        "priority": {"type": "integer"}, "trigger": {"enum": ["manual", "planner", "cli"]},
        "error": {"type": ["string", "null"]},
        "job_actions": {"type": "array", "items": ref("JobAction")}}},
    "JobSubmitted": {"type": "object", "properties": {
        "job": ref("Job"), "created": {"type": "boolean"}}},
    "JobCancelled": {"type": "object", "properties": {
        "job": ref("Job"), "cancelled": {"type": "boolean"}}},
    "Event": {"type": "object", "properties": {
        "id": {"type": "integer"}, "topic": {"type": "string"}, "table": ref("TableRef"),
        "payload": OBJ, "created_at": {"type": "string", "format": "date-time"}}},
    "Policy": {"type": "object", "properties": {
        "policy_type": {"enum": [t.value for t in PolicyType]},
        "scope": {"enum": ["catalog", "namespace", "table"]}, "catalog": {"type": "string"},
        "namespace": {"type": ["string", "null"]}, "table_name": {"type": ["string", "null"]},
        "enabled": {"type": "boolean"}, "config": OBJ}},
    "PolicyBody": {"type": "object", "additionalProperties": False, "properties": {
        "enabled": {"type": "boolean", "default": True},
        "config": {"description": "keys depend on the policy type in the path (unknown keys "
                                  "are refused); only the keys given are stored",
                   "oneOf": list(config_schemas().values()) or [OBJ]}}},
    "HoldRelease": {"type": "object", "properties": {
        "table": OBJ, "released": {"type": "object", "properties": {
            "table_id": {"type": "integer"}, "table": {"type": "string"},
            "previous_hold": {"description": "the hold as it was: {reason, action, evidence, "
                                             "at}"},
            "released_by": {"type": "string", "description": "token:NAME"},
            "reason": {"type": ["string", "null"]},
            "released_at": {"type": "string", "format": "date-time"},
            "event_id": {"type": "integer", "description": "the table.hold_released event"}}}}},
    "HoldReleaseRequest": model_schema(HoldReleaseIn),
    "JobSubmit": model_schema(JobIn),
    "SimulateRequest": model_schema(SimulateIn),
}
SCHEMAS.update(DEFS)


def hold_release_op() -> dict[str, Any]:
    operation = op("Release the table's maintenance hold (who and why go to the "
                   "table.hold_released event)", ok(ref("HoldRelease")), params=TABLE_PATH,
                   body=ref("HoldReleaseRequest"), write=True,
                   extra={**TABLE_404, "409": error("the table is not on hold (TABLE_NOT_HELD)")})
    operation["requestBody"]["required"] = False  # an empty body releases without a reason
    return operation


def _paths() -> dict[str, Any]:
    text = {"description": "OK", "content": {"text/plain": {"schema": {"type": "string"}}}}
    paths: dict[str, Any] = {
        "/": {"get": op("Redirect to the web UI", {"description": "redirect to /ui/"},
                        status="307")},
        "/healthz": {"get": op("Liveness", ok(OBJ))},
        "/readyz": {"get": op("Readiness: database reachable, listener connected", ok(OBJ),
                              extra={"503": ok(OBJ, "not ready, with the reason")})},
        "/metrics": {"get": op("Prometheus metrics (fleet gauges read at scrape time)", text)},
        "/openapi.json": {"get": op("This document", ok(OBJ))},
        "/summary": {"get": op("Fleet counts: tables by health and issue, jobs by state",
                               ok(OBJ))},
        "/tables": {"get": op("Tables still in their catalog, paged", ok(page_of("TableListItem")),
                              params=[*PAGE, param("catalog"), param("namespace"),
                                      param("health", schema={"enum": [
                                          "healthy", "warning", "critical", "unknown"]}),
                                      param("issue", description="issue code, e.g. SMALL_FILES"),
                                      param("q", description="substring of catalog.ns.table"),
                                      param("sort", schema={"enum": ["score", "-score", "name"]},
                                            description="score: worst first (default)")])},
        T: {"get": op("One table: latest health, status, recommendation and job",
                      ok(ref("TableDetail")), params=TABLE_PATH, extra=TABLE_404)},
        f"{T}/status": {"get": op("Latest status snapshot", ok(ref("Status")),
                                  params=TABLE_PATH, extra={"404": error(
                                      "TABLE_NOT_FOUND or NO_STATUS")})},
        f"{T}/status/history": {"get": op("Metric history, oldest first",
                                          ok(page_of("StatusPoint")),
                                          params=[*TABLE_PATH, *PAGE], extra=TABLE_404)},
        f"{T}/health": {"get": op("Latest health assessment", ok(ref("Health")),
                                  params=TABLE_PATH, extra={"404": error(
                                      "TABLE_NOT_FOUND or NO_HEALTH")})},
        f"{T}/maintenance/recommendation": {"get": op(
            "Latest recommendation", ok(ref("Recommendation")), params=TABLE_PATH,
            extra={"404": error("TABLE_NOT_FOUND or NO_RECOMMENDATION")})},
        f"{T}/jobs": {"get": op("The table's jobs, newest first", ok(page_of("Job")),
                                params=[*TABLE_PATH, *PAGE], extra=TABLE_404)},
        f"{T}/history": {"get": op("Maintenance history: jobs with actions and impact",
                                   ok(page_of("Job")), params=[*TABLE_PATH, *PAGE],
                                   extra=TABLE_404)},
        f"{T}/hold/release": {"post": hold_release_op()},
        "/jobs": {
            "get": op("Jobs newest first", ok(page_of("Job")), params=[
                *PAGE, param("state", schema={"enum": [
                    "queued", "running", "succeeded", "failed", "cancelled"]}),
                *TABLE_FILTER], extra=TABLE_404),
            "post": op("Queue maintenance for a table (deduplicated per table)",
                       ok(ref("JobSubmitted"), "created"), body=ref("JobSubmit"), write=True,
                       status="201", extra={"200": ok(ref("JobSubmitted"),
                                                      "a job for the table is already active"),
                                            "409": error(REFUSED), **TABLE_404})},
        "/jobs/{id}": {"get": op("One job with its actions and their impact", ok(ref("Job")),
                                 params=[param("id", "path", {"type": "integer"})],
                                 extra={"404": error("JOB_NOT_FOUND")})},
        "/jobs/{id}/cancel": {"post": op(
            "Cancel a queued job, or ask a running one to stop", ok(ref("JobCancelled")),
            params=[param("id", "path", {"type": "integer"})], write=True,
            extra={"404": error("JOB_NOT_FOUND"),
                   "409": error("JOB_ALREADY_FINISHED")})},
        "/events": {"get": op("Outbox events newest first", ok(page_of("Event")), params=[
            *PAGE, param("topic", description="e.g. job.finished"), *TABLE_FILTER],
            extra=TABLE_404)},
        "/policies": {"get": op("Maintenance policies", ok({"type": "object", "properties": {
            "items": {"type": "array", "items": ref("Policy")}}}), params=[
            param("policy_type"), param("scope"), param("catalog"), param("namespace"),
            param("table")])},
        "/policies/simulate": {"post": op(
            "Effective policy of a table and what it would lead to now (writes nothing; "
            "`policies` in the body are tried as if stored)", ok(OBJ),
            body=ref("SimulateRequest"), write=True,
            extra={**TABLE_404, "501": error("NOT_AVAILABLE: no policy engine installed")})},
        "/policies/simulate/fleet": {"post": op(
            "Which tables of a catalog proposed policies would change, with their new actions "
            "and the estimated files/bytes affected (writes nothing, enqueues nothing)",
            ok({"type": "object", "properties": {
                "tables_evaluated": {"type": "integer"}, "tables_changed": {"type": "integer"},
                "totals": OBJ, "changes": {"type": "array", "items": OBJ}}}),
            body={"type": "object", "required": ["catalog", "policies"], "properties": {
                "catalog": {"type": "string"},
                "policies": {"type": "array", "items": OBJ, "minItems": 1}}},
            write=True)},
    }
    for scope, path in POLICY_PATHS.items():
        names = ["catalog", "namespace", "table"][: {"catalog": 1, "namespace": 2,
                                                     "table": 3}[scope]]
        params = [param(n, "path") for n in names]
        params.append(param("policy_type", "path", {"enum": [t.value for t in PolicyType]}))
        paths[path] = {
            "put": op(f"Create or replace a {scope}-level policy",
                      ok({"type": "object", "properties": {"policy": ref("Policy"),
                                                           "created": {"type": "boolean"}}},
                         "replaced"), params=params, body=ref("PolicyBody"), write=True,
                      extra={"201": {"description": "created"}, **TABLE_404}),
            "delete": op(f"Remove a {scope}-level policy", {"description": "removed"},
                         params=params, write=True, status="204",
                         extra={"404": error("POLICY_NOT_FOUND")}),
        }
    return paths


def document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {"title": "Icepack gateway", "version": "0.1.0",
                 "description": "Read APIs over Icepack's Postgres state, and operator writes "
                                "(bearer token from `icepack token create NAME`)."},
        "paths": _paths(),
        "components": {"schemas": SCHEMAS, "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer"}}},
    }


_DOCUMENT = document()


async def openapi_endpoint(_request: Request) -> Response:
    return ApiResponse(_DOCUMENT)


routes = [Route("/openapi.json", openapi_endpoint, methods=["GET"])]
