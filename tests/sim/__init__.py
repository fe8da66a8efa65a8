"""The simulation tier (STYLE 13): seeded, deterministic, replayable runs of the broker's real
components in one event loop on virtual time, over fault-injecting seams.

Kernel: `loop` (virtual-time event loop and clock), `determinism` (seeded sources and the
guard against hidden ones), `trace` (a run's story), `runner` (one seed, bounded, with a
replay line on failure), `nodes` (which node a task belongs to; kill -9 and restart), the
seams `objectstore`, `metadata` and `network`, `registry` (scenarios by name) and `cli`
(`python -m tests.sim`, `make sim`). The 3-broker scenarios share `cluster` (real brokers),
`kafka` (the client connection), `workload` and `txn_workload` (clients and what they were
told), `faults` (their topics and fault schedule) and `audit`. Scenarios live in `scenarios/`; bugs the scenarios
found, reduced to small runs, in `test_findings.py`. See the docstring of each module.
"""
