"""The WAL file manager: finds WAL objects no replica can reference any more and deletes them
(docs/architecture.md "WAL file manager")."""
