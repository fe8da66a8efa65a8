"""Loopback clusters for development and the integration tests: etcd (`etcd`), an S3
endpoint from moto's server mode (`s3`), broker processes (`brokers`) and the launcher that
wires them together (`cluster`, behind `shoal dev cluster`). One implementation, so what a
developer runs is what the tests run. Needs etcd and the `[test]` extra; nothing in the broker
itself imports this package."""

from .cluster import DevCluster, MissingDependency, UsageError

__all__ = ["DevCluster", "MissingDependency", "UsageError"]
