"""Fixtures for the security tests: a test PKI made once per run, and one secured
broker shared by the modules that only need a broker (tests use unique names and
grant their own ACLs). Tests that restart a broker or need other settings start
their own."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.testing_tls import Pki, make_pki

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # secure.py, whatever pytest's import mode
    sys.path.insert(0, str(HERE))

from secure import ADMIN, ADMIN_PASSWORD, SecureBroker, start_secure_broker  # noqa: E402

pytestmark = pytest.mark.embedded


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="session")
def secure_broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[SecureBroker]:
    process = start_secure_broker(tmp_path_factory.mktemp("secure") / "data", pki)
    broker = SecureBroker(process, pki, {ADMIN: ADMIN_PASSWORD})
    try:
        yield broker
    finally:
        broker.close()
        process.stop()
