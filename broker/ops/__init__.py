"""The operator CLI's Kafka-API commands (`shoal topics`, `shoal configs`, `shoal groups`,
`shoal cluster`, `shoal config`, `shoal version`): thin layers over kafka-python's admin client, so they work against any
broker of the cluster, and against any Kafka-compatible one for what Kafka has."""
