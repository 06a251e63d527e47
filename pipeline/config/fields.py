"""The config's shared field types: durations, times, names, replication, secrets.

What several sections' fields are made of, each parsed from its YAML spelling once
(``10s``, an HLC or an RFC 3339 time, a topic-safe name, ``auto`` or a replica count), the
masking of settings whose names look secret, the frozen, strict base every section shares
(unknown keys refused) and the error an impossible combination of a section's options
raises, reported at its key path.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainValidator
from pydantic.config import JsonDict
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

from schemas.hlc import Hlc, parse_time

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_NAME = r"^[A-Za-z0-9._-]+$"


def parse_duration(value: object) -> object:
    """Accept ``10s``, ``1h30m``, ``500ms`` or a number of seconds; leave the rest to pydantic."""
    if isinstance(value, bool):
        return value  # refused by the timedelta type with a clear message
    if isinstance(value, int | float):
        return timedelta(seconds=value)
    if isinstance(value, str):
        text = value.strip()
        parts = _DURATION.findall(text)
        if not parts or "".join(a + u for a, u in parts) != text:
            raise PydanticCustomError(
                "duration",
                "not a duration: {value!r} (use e.g. 500ms, 10s, 5m, 1h30m, 1d)",
                {"value": value},
            )
        return timedelta(seconds=sum(float(a) * _DURATION_UNITS[u] for a, u in parts))
    return value


def _parse_hlc(value: object) -> object:
    if isinstance(value, Hlc) or value is None:
        return value
    if isinstance(value, tuple) and len(value) == 2 and all(type(v) is int for v in value):
        return Hlc(*value)  # a config's own dump (model_dump), validated again
    try:
        return parse_time(str(value))
    except ValueError as exc:
        raise PydanticCustomError("time", "{reason}", {"reason": str(exc)}) from exc


def yaml_yes_no(value: object) -> object:
    """``yes``/``no`` for the booleans YAML 1.1 reads a bare yes/no as (the option's words)."""
    if value is True:
        return "yes"
    if value is False:
        return "no"
    return value


Duration = Annotated[timedelta, BeforeValidator(parse_duration)]
Time = Annotated[Hlc, BeforeValidator(_parse_hlc)]
Name = Annotated[str, Field(min_length=1, pattern=_NAME)]


def _replication(value: Any) -> int | str:
    if value == "auto" or (type(value) is int and value > 0):
        return value  # type: ignore[no-any-return]
    if isinstance(value, str) and value.isdigit() and int(value) > 0:
        return int(value)
    raise PydanticCustomError("replication", "should be a positive integer or 'auto'")


# Topics created: "auto" is 3 copies where the cluster has 3 brokers or more, else one per
# broker (sinks.admin.replication_for); a number is taken as given (a warning when lower).
Replication = Annotated[int | Literal["auto"], PlainValidator(_replication)]
_SECRET_WORDS = ("password", "secret", "jaas", "token", "credentials", "sasl", "ssl.key")
MASK = "**********"


def looks_secret(name: str) -> bool:
    """True for a setting whose value must never be printed or logged (``sasl.jaas.config``…)."""
    lowered = name.lower()
    return any(word in lowered for word in _SECRET_WORDS)


COCKROACHDB = "cockroachdb"  # a field's CockroachDB name, in its json_schema_extra


def cockroachdb(name: str) -> JsonDict:
    """A field's ``json_schema_extra``: the CockroachDB option it stands for.

    The config reference shows it beside the option's own name.
    """
    return {COCKROACHDB: name}


def combination(field: str, reason: str) -> PydanticCustomError:
    """An impossible combination, reported at ``<section>.<field>``."""
    return PydanticCustomError("combination", reason, {"field": field})


def keys(model: type[BaseModel]) -> dict[str, FieldInfo]:
    """A section's fields by the keys a config writes.

    An alias where the field has one: ``kafka_sink_config``'s are Sarama's (``Flush``…).
    """
    return {field.alias or name: field for name, field in model.model_fields.items()}


class Section(BaseModel):
    """A section of the config: frozen, its unknown keys refused, no input in its errors."""

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)
