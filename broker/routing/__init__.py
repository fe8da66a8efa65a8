"""AZ routing: which AZ a client is in, and which broker of that AZ represents a diskless
partition for it (DESIGN "AZ routing"). Pure functions plus a small per-connection memory."""
