"""Text for `shoal walfiles status|gc` (the JSON format prints the answers as they are)."""

from __future__ import annotations

import datetime
from typing import Any


def size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def duration(ms: int) -> str:
    if ms < 0:
        return "never"
    seconds = ms // 1000
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"


def status_text(status: dict[str, Any]) -> str:
    state = f"PAUSED: {status['paused_reason']}" if status["paused"] else "running"
    last = (
        "none yet"
        if status["last_success_ms"] < 0
        else datetime.datetime.fromtimestamp(status["last_success_ms"] / 1000, datetime.timezone.utc).strftime(
            "%Y-%m-%d %H:%M:%S UTC"
        )
        + f" ({duration(status['last_success_age_ms'])} ago)"
    )
    rows = [
        ("manager", f"broker {status['manager_id']}, {state}"),
        (
            "objects",
            f"{status['objects']} ({size(status['bytes'])}), oldest {duration(status['oldest_object_age_ms'])} old",
        ),
        ("referenced", size(status["referenced_bytes"])),
        ("dead in live objects", size(status["dead_bytes"])),
        (
            "unreferenced",
            f"{status['unreferenced_objects']} objects ({size(status['unreferenced_bytes'])}) waiting out the grace period",
        ),
        ("last cycle", last),
        (
            "deleted in the last hour",
            f"{status['deleted_objects_last_hour']} objects ({size(status['deleted_bytes_last_hour'])}), "
            f"{status['delete_failures_last_hour']} failed",
        ),
        ("next cycle in", duration(status["next_cycle_in_ms"]) if status["next_cycle_in_ms"] >= 0 else "-"),
    ]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


def report_text(report: dict[str, Any]) -> str:
    verb = "would delete" if report["dry_run"] else "deleted"
    lines = []
    if report["status"]["paused"]:
        lines.append(f"PAUSED: {report['status']['paused_reason']}: nothing was judged or deleted")
    else:
        if report["dry_run"]:
            ready = [p for p in report["planned"] if p["ready_in_ms"] == 0]
            lines.append(f"dry run: {verb} {len(ready)} objects now; {report['planned_total']} found unreferenced")
        else:
            lines.append(
                f"{verb} {report['deleted_objects']} objects ({size(report['deleted_bytes'])}), "
                f"{report['failed_deletes']} failed; {report['planned_total']} were found unreferenced"
            )
        for planned in report["planned"]:
            when = "now" if planned["ready_in_ms"] == 0 else f"in {duration(planned['ready_in_ms'])}"
            lines.append(f"  {planned['key']}  {size(planned['size'])}  {when}: {planned['reason']}")
        if report["planned_total"] > len(report["planned"]):
            lines.append(f"  ... and {report['planned_total'] - len(report['planned'])} more")
        for reason, count in sorted(report["kept"].items()):
            lines.append(f"kept {count}: {reason}")
    lines.append("")
    lines.append(status_text(report["status"]))
    return "\n".join(lines)
