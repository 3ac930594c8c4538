"""Builds the optional compiled record-batch codec; everything else is in pyproject.toml.

``optional=True``: without a working C compiler (or Python headers) the build of
the extension fails with a warning, the install succeeds, and Odradek uses the
pure-Python codec (odradek.protocol._codec_py). See docs/architecture.md.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "odradek.protocol._codec",
            sources=["src/odradek/protocol/_codec.c"],
            optional=True,
        )
    ]
)
