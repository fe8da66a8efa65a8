"""Text for `shoal tiering status|run` (the JSON format prints the answers as they are)."""

from __future__ import annotations

import datetime
from typing import Any

from broker.walfiles.render import size


def _when(ms: int) -> str:
    if ms <= 0:
        return "never"
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def status_text(answers: list[dict[str, Any]]) -> str:
    header = (
        "TOPIC",
        "PARTITION",
        "LEADER",
        "TIERED SEGMENTS",
        "TIERED",
        "FIRST OFFSET",
        "TIERED END",
        "LOCAL START",
        "BACKLOG",
    )
    rows = [header]
    lines = []
    for answer in answers:
        for p in answer["partitions"]:
            rows.append(
                (
                    p["topic"],
                    str(p["partition"]),
                    str(answer["node_id"]),
                    str(p["tiered_segments"]),
                    size(p["tiered_bytes"]),
                    str(p["tiered_start"]),
                    str(p["tiered_end"]),
                    str(p["local_start"]),
                    size(p["backlog_bytes"]),
                )
            )
        last = answer["last_run"]
        state = "enabled" if answer["enabled"] else "disabled (tiering.enable=false or stateless)"
        line = f"broker {answer['node_id']}: {state}; last success {_when(answer['last_success_ms'])}"
        if last is not None:
            line += f"; last run {_when(last['started_ms'])}: {last['committed']} committed, {last['deleted']} deleted"
            if last["job_error"]:
                line += f", job failed: {last['job_error']}"
            for failure in last["failed"]:
                line += f"\n  failed: {failure}"
        lines.append(line)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    table = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    if len(rows) == 1:
        table.append("(no led partition has remote.storage.enable=true on a diskless topic)")
    return "\n".join(table + [""] + lines)


def run_text(answers: list[dict[str, Any]]) -> str:
    lines = []
    for answer in answers:
        run = answer["run"]
        seconds = (run["finished_ms"] - run["started_ms"]) / 1000
        line = (
            f"broker {answer['node_id']}: planned {run['planned']}, committed {run['committed']}, "
            f"deleted {run['deleted']} in {seconds:.1f}s"
        )
        if run["job_error"]:
            line += f"\n  job failed: {run['job_error']}"
        for failure in run["failed"]:
            line += f"\n  failed: {failure}"
        lines.append(line)
    return "\n".join(lines)
