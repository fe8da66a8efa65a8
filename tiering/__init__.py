"""Tiered segments: what the broker and the Spark job share (the segment format, the plan and
result manifests, the range assembler). The tiering service that plans, runs and commits
jobs and reads tiered segments is the broker's half: broker/tiering/."""
