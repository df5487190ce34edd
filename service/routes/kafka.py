"""Owns /v1/queries/{id}/kafka: a query's Kafka sink (set, read, remove)."""
from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, Field, field_validator
from starlette.requests import HTTPConnection

from service.deps import StateDep, reject_unknown_parameters
from service.engine_service import ServiceUnavailable
from service.kafka import (RESERVED_SETTINGS, KafkaDeliverer, KafkaSink, KafkaSinkError,
                           KafkaUnavailable)
from service.routes.events import (MAX_ID, NOT_FOUND_RESPONSE,
                                   refuse_cursor_past_the_end, require_query)
from service.webhooks import EVERY_RETAINED

router = APIRouter(prefix="/v1/queries", tags=["kafka"], responses=NOT_FOUND_RESPONSE,
                   dependencies=[Depends(reject_unknown_parameters), Depends(require_query)])

# Kafka's own limit on a topic name, and the characters it allows.
TOPIC_MAX = 249
TOPIC_PATTERN = r"^[a-zA-Z0-9._-]+$"
# Parts of a client setting's name that mark its value as a secret (never shown again).
SECRET_MARKS = ("password", "secret", "key", "jaas", "token", "pem")


async def get_kafka(conn: HTTPConnection) -> KafkaDeliverer:
    return conn.app.state.kafka


KafkaDep = Annotated[KafkaDeliverer, Depends(get_kafka)]


# What PUT accepts: the broker, the topic, client settings passed to librdkafka, where to start.
class KafkaSinkSet(BaseModel):
    model_config = {"extra": "forbid", "strict": True}

    bootstrap_servers: str = Field(min_length=1, max_length=2048, description=(
        "host:port[,host:port...] of the Kafka cluster"))
    topic: str = Field(min_length=1, max_length=TOPIC_MAX, pattern=TOPIC_PATTERN,
                       description="an existing topic the events are produced to")
    settings: dict[str, str | int | float | bool] = Field(default_factory=dict, description=(
        "librdkafka client settings passed as they are (security.protocol, sasl.mechanism, "
        "sasl.username, sasl.password, ssl.ca.location, transactional.id...); secret values "
        "are never returned"), json_schema_extra={
            "propertyNames": {"not": {"enum": sorted(RESERVED_SETTINGS)}}})
    after: int | None = Field(None, ge=EVERY_RETAINED, le=MAX_ID, description=(
        "produce the events after this batch (-1: every event still retained); default: "
        "from where this sink was, or after the last committed batch for a new one"))

    @field_validator("settings")
    @classmethod
    def _not_reserved(cls, settings: dict) -> dict:
        reserved = sorted(RESERVED_SETTINGS & settings.keys())
        if reserved:
            raise ValueError(f"{', '.join(reserved)}: set by the sink itself (exactly-once "
                             "delivery depends on it)")
        return settings


# What the API shows of a sink: its settings with secret values masked.
class KafkaSinkPublic(BaseModel):
    query_id: int
    bootstrap_servers: str
    topic: str
    partition: int = Field(description="the partition every message of the query goes to")
    settings: dict[str, str | int | float | bool]
    transactional_id: str
    delivered_through: int = Field(description="every event up to this batch was produced and "
                                               "committed")
    delivered_offset: int = Field(description="the offset of that batch's message (before "
                                              "the first: the partition's end when set, less 1)")
    created_at: str


def _masked(name: str, value):
    return "***" if any(mark in name.lower() for mark in SECRET_MARKS) else value


def _public(sink: KafkaSink) -> KafkaSinkPublic:
    return KafkaSinkPublic(
        query_id=sink.query_id, bootstrap_servers=sink.bootstrap_servers, topic=sink.topic,
        partition=sink.partition, transactional_id=sink.transactional_id,
        settings={name: _masked(name, value) for name, value in sink.client_settings.items()},
        delivered_through=sink.delivered_through, delivered_offset=sink.delivered_offset,
        created_at=sink.created_at)


def _no_sink(query_id: int) -> HTTPException:
    return HTTPException(404, f"query {query_id} has no Kafka sink")


@router.put("/{query_id}/kafka", response_model=KafkaSinkPublic, responses={
    503: {"description": "the `kafka` extra is not installed, or the broker cannot be "
                         "reached"}})
async def set_kafka_sink(query_id: int, body: KafkaSinkSet, state: StateDep, kafka: KafkaDep):
    """Produce the query's result events to a Kafka topic (replacing any sink it had), one
    message per batch, exactly once per batch id (docs/service.md, Kafka)."""
    # A cursor past the last batch would skip the events of batches not yet applied.
    await refuse_cursor_past_the_end(state, body.after, ("body", "after"))
    try:
        sink = await kafka.set(query_id, body.bootstrap_servers, body.topic, body.settings,
                               body.after)
    except KafkaUnavailable as exc:
        raise ServiceUnavailable(str(exc)) from exc
    except KafkaSinkError as exc:
        if exc.field is not None:
            raise RequestValidationError([{"loc": ("body", exc.field), "type": "value_error",
                                           "msg": str(exc)}]) from exc
        raise ServiceUnavailable(f"Kafka at {body.bootstrap_servers}: {exc}") from exc
    return _public(sink)


@router.get("/{query_id}/kafka", response_model=KafkaSinkPublic)
async def get_kafka_sink(query_id: int, kafka: KafkaDep):
    """The query's Kafka sink and how far it has produced."""
    sink = await kafka.get(query_id)
    if sink is None:
        raise _no_sink(query_id)
    return _public(sink)


@router.delete("/{query_id}/kafka", status_code=204)
async def delete_kafka_sink(query_id: int, kafka: KafkaDep) -> Response:
    """Stop producing the query's events."""
    if not await kafka.remove(query_id):
        raise _no_sink(query_id)
    return Response(status_code=204)
