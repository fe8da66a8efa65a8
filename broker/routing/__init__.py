"""AZ routing: which AZ a client is in, and which broker of that AZ represents a diskless
partition for it (DESIGN "AZ routing"), pure functions plus a small per-connection memory;
and what a broker does for partitions it serves without hosting them: entry reads from a
replica in its AZ (remote_reads.py asks, read_service.py answers), partition requests sent
on to the leader (forwarding.py), and their RPC messages (messages.py)."""
