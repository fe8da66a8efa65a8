"""The one C extension (broker/protocol/_records.c: the produce path's walk over a batch's
records); everything else about the package is in pyproject.toml. `pip install -e .` and
`pip install .` build it; in a checkout used through PYTHONPATH,
`python setup.py build_ext --inplace` does."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("broker.protocol._records", ["broker/protocol/_records.c"], extra_compile_args=["-O2"])])
