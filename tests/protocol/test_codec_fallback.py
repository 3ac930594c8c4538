"""The codec's hot paths also pass on the pure-Python fallback.

``test_batch_codec.py`` compares the two implementations function by function in
this process. Here a child pytest runs with ``ODRADEK_NO_NATIVE=1`` (the compiled
codec is never imported) over the tests that exercise the codec end to end: the
producer's batches, the bulk column path, the consumer's records, and the Spark source's Arrow path
against a broker. A handful of tests, so CI pays seconds for the second way.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from odradek.protocol.native import NO_NATIVE_ENV

ROOT = Path(__file__).resolve().parents[2]
ON_THE_FALLBACK = [
    "tests/protocol/test_batch_codec.py::test_the_compiled_codec_is_in_use_unless_disabled",
    "tests/protocol/test_batch_codec.py::test_batch_from_body_equals_build_batch",
    "tests/client/test_client_producer.py::test_round_trip_10000_records[odradek]",
    "tests/client/test_client_producer.py::test_compression_codecs[odradek-lz4]",
    "tests/client/test_client_producer.py::test_send_columns_round_trip",
    "tests/client/test_fetched_records.py::test_record_lists_are_lazy_sequences_with_deserializers",
    "tests/client/test_fetched_records.py::test_headers_are_read_with_their_records",
    "tests/client/test_fetched_records.py::test_a_corrupt_batch_fails_after_the_records_before_it",
    "tests/spark/test_spark_executor.py::test_columns_path_equals_the_record_path",
    "tests/spark/test_spark_executor.py::test_read_range_returns_exactly_the_range",
]


# -n 0: in this test's process only, not two more xdist workers of its own.
PYTEST_OPTIONS = ("-q", "-x", "-n", "0", "-p", "no:cacheprovider")


@pytest.mark.timeout(300)
def test_codec_paths_pass_on_the_pure_python_fallback() -> None:
    env = dict(os.environ, **{NO_NATIVE_ENV: "1"})
    result = subprocess.run(
        [sys.executable, "-m", "pytest", *PYTEST_OPTIONS, *ON_THE_FALLBACK],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert f"{len(ON_THE_FALLBACK)} passed" in result.stdout
