"""Tiering (KIP-405 on diskless topics): the partition leaders' offload of old ranges into
Kafka segments assembled by Spark jobs, their commit, their retention, and reads from them."""
