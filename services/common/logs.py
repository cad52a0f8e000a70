"""Structured JSON logs, one object per line on stdout, carrying the request id of the call.

Every record has `time`, `level`, `service`, `logger`, `message`, and, inside a call, `request_id`,
`method` and `caller`. Extra fields go in `extra={"fields": {...}}`. The request id comes from the
caller's `x-request-id` metadata (a new one otherwise) and is sent on with every outbound call
(`services.client.channels`), so one id follows a call across services.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
import uuid
from datetime import UTC, datetime
from typing import Any

REQUEST_ID_HEADER = "x-request-id"

request_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("buraco_request_id", default=None)
method_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("buraco_method", default=None)
caller_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("buraco_caller", default=None)


def new_request_id() -> str:
    return uuid.uuid4().hex


def valid_request_id(value: str) -> bool:
    return 0 < len(value) <= 128 and value.isascii() and value.isprintable()


class JsonFormatter(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "service": self.service,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, var in (("request_id", request_id_var), ("method", method_var), ("caller", caller_var)):
            value = var.get()
            if value is not None:
                entry[key] = value
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            entry.update(fields)
        if record.exc_info:
            entry["traceback"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure(service: str, level: str = "INFO") -> None:
    """Send every log record as JSON to stdout (replacing any handlers of the root logger)."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonFormatter(service))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
