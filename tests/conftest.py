"""How the default run spreads over two pytest-xdist workers (``-n 2`` in pyproject's
addopts; ``-n 0`` runs everything in one process).

``--dist loadgroup`` sends every test of one ``xdist_group`` to the same worker, one
after another. Each test file is a group of its own (as ``--dist loadfile``), so a
module's fixtures (a cluster, a browser) are set up once, on one worker. Larger groups,
each for a reason:

- ``spark``: the Spark tests share one SparkSession (a JVM of about a gigabyte) per
  worker, and some start Spark processes of their own (a killed driver, a local
  cluster); two at once would double both, and Spark gives each Python worker a fixed
  10 s to connect back. test_codec_fallback.py's child pytest starts a SparkSession
  too, and test_extras.py's spark extra runs the clickstream job (the install tests
  began at the same time as the Spark tests once, and the killed driver's restart
  test missed its 300 s).
- ``port-9092``: tests that start ``odradek serve`` with its default listener.

A worker takes the next group when it is done with one, so a long group handed out last
keeps one worker busy while the other idles: the groups in ``LONGEST_FIRST`` (the
longest, most of a minute to several minutes each) are collected first, and
``--no-loadscope-reorder`` keeps that order (xdist would otherwise order groups by their
number of tests).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

TESTS = __file__.rsplit("/", 1)[0]

GROUP_BY_PATH = {
    "spark/": "spark",
    "protocol/test_codec_fallback.py": "spark",
    "install/test_extras.py": "spark",
    "broker/test_serve.py": "port-9092",
    "reliability/test_data_dir_lock.py": "port-9092",
}

# Measured with --durations on 2 cores: the Spark and install tests together ~9
# minutes, then the rest from about 40 s to 2 minutes.
LONGEST_FIRST = (
    "spark",
    "client/test_group_consumer.py",
    "interop/test_transactions_crash.py",
    "interop/test_groups_consumer_protocol.py",
    "log/test_log_compaction.py",
    "interop/test_groups_migration.py",
    "cluster/test_faults.py",
)


def pytest_configure(config: pytest.Config) -> None:
    """Where PYTHONDONTWRITEBYTECODE keeps bytecode out of the tree, the children the
    tests start (brokers, clusters, the CLI, xdist's workers) still share one compiled
    copy, in a cache outside it: else each of the hundreds of them compiles Odradek and
    kio again (about 0.4 s of CPU each)."""
    if "PYTHONDONTWRITEBYTECODE" in os.environ and "PYTHONPYCACHEPREFIX" not in os.environ:
        del os.environ["PYTHONDONTWRITEBYTECODE"]
        cache = Path(tempfile.gettempdir()) / f"odradek-tests-pycache-{os.getuid()}"
        os.environ["PYTHONPYCACHEPREFIX"] = str(cache)


def group_of(item: pytest.Item) -> str:
    relative = str(item.path).removeprefix(TESTS + "/")
    return next((g for prefix, g in GROUP_BY_PATH.items() if relative.startswith(prefix)), relative)


# tryfirst: xdist's worker names each test's group in this same hook, from the marks
# that are there when it runs.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    groups = {}
    for item in items:
        group = group_of(item)
        groups[item] = group
        item.add_marker(pytest.mark.xdist_group(group))
    rank = {group: i for i, group in enumerate(LONGEST_FIRST)}
    # stable: each group keeps its own order, and the others their collection order
    items.sort(key=lambda item: rank.get(groups[item], len(rank)))
