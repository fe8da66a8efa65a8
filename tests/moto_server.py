"""A moto S3 server on loopback for tests and benchmarks: `broker.devcluster.s3`, the one
implementation (also behind `shoal dev cluster`)."""

from broker.devcluster.process import stop_process
from broker.devcluster.s3 import FAKE_AWS_ENV, MotoServer, start_moto

__all__ = ["FAKE_AWS_ENV", "MotoServer", "start_moto", "stop_process"]
