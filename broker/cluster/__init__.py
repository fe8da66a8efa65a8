"""The cluster: broker membership, the controller, replica placement and leader elections.

Everything shared lives in the metadata store (records in broker/metadata/records.py); each
broker keeps a copy in its ClusterView and acts on it: leader or follower of the partitions it
hosts. Placement and elections are pure functions of that state.
"""
