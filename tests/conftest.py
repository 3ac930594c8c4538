"""Which tests must share one pytest-xdist worker (with ``-n 2``).

``--dist loadgroup`` sends every test of one ``xdist_group`` to the same worker, one
after another. Each test file is a group of its own (as ``--dist loadfile``), so a
module's fixtures (a cluster, a browser) are set up once, on one worker. Larger groups,
each for a reason:

- ``spark``: the Spark tests share one SparkSession (a JVM of about a gigabyte) per
  worker, and each starts Spark processes of its own; two at once would double both.
- ``port-9092``: tests that start ``odradek serve`` with its default listener.
"""

from __future__ import annotations

import pytest

TESTS = __file__.rsplit("/", 1)[0]

GROUP_BY_PATH = {
    "spark/": "spark",
    "broker/test_serve.py": "port-9092",
    "reliability/test_data_dir_lock.py": "port-9092",
}


# tryfirst: xdist's worker names each test's group in this same hook, from the marks
# that are there when it runs.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        relative = str(item.path).removeprefix(TESTS + "/")
        group = next(
            (g for prefix, g in GROUP_BY_PATH.items() if relative.startswith(prefix)), relative
        )
        item.add_marker(pytest.mark.xdist_group(group))
