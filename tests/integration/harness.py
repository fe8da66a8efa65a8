"""Real `shoal broker` processes for the integration tests: `broker.devcluster.brokers`, the
one implementation (also behind `shoal dev cluster`), and its process helpers."""

from broker.devcluster.brokers import BrokerError, BrokerProcess, broker_command
from broker.devcluster.process import free_port, wait_until

__all__ = ["BrokerError", "BrokerProcess", "broker_command", "free_port", "wait_until"]
