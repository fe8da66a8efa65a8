"""`shoal broker --log-format json`: one JSON object per line, for log pipelines (Loki,
Elasticsearch, CloudWatch) that should not parse free text."""

from __future__ import annotations

import json
import logging
import time


class JsonFormatter(logging.Formatter):
    """{"ts": ISO 8601 UTC with milliseconds, "level", "logger", "message"[, "exception"]}."""

    def format(self, record: logging.LogRecord) -> str:
        created = time.gmtime(record.created)
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", created) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)
