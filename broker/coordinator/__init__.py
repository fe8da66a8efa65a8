"""The coordinator runtime (Kafka's coordinator-common): loads, writes, compacts, times and
unloads the state a coordinator keeps in the partitions of an internal topic. A coordinator
plugs in a `CoordinatorShard` per partition (`runtime`); consumer groups are the first."""
