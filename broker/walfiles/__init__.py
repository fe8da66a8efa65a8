"""The WAL file manager: finds WAL objects no replica can reference any more and deletes them
(docs/architecture.md "The WAL file manager"); `shoal walfiles` and the `shoal_walfiles_*`
metrics report on it.

This is the broker's half. The top-level `walfiles` package (a different package: imports
here name it absolutely, `from walfiles.keys import ...`) holds the WAL object format and
keys, with no I/O and nothing of the broker."""
