"""The records of a v2 batch, walked in C (`_records.c`, built by `pip install`): `scan` an
uncompressed records section, or feed a `Scanner` a decompressed stream in chunks; both give
(max timestamp, indices of records outside the timestamp window) or raise RecordError.

The extension is part of the package, not optional: a pure-Python walk would cost a loop
iteration per record on the produce path. A checkout used through PYTHONPATH builds it with
`python setup.py build_ext --inplace` (`make install` does it for the project's own venv)."""

try:
    from ._records import RecordError, Scanner, scan
except ImportError as exc:  # pragma: no cover - a build problem, not a code path
    raise ImportError(
        "broker.protocol._records (the C walk over record batches) is not built here: run "
        "`make install`, or `python setup.py build_ext --inplace` in this checkout"
    ) from exc

__all__ = ["RecordError", "Scanner", "scan"]
