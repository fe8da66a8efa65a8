"""AZ routing: which AZ a client is in, and which broker of that AZ represents a diskless
partition for it (DESIGN "AZ routing"), pure functions plus a small per-connection memory;
and what a broker does for partitions it serves without hosting them: partition requests
sent on to the leader (request_forwarding.py), and the RPC messages of those and of entry reads
from a replica in its AZ (messages.py; reads/remote.py asks, reads/read_service.py
answers)."""
