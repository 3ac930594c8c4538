"""The Jepsen-style checkers (`kafka_checkers`) on small hand-written histories: one with
no anomaly, and one per anomaly with exactly that anomaly (and only the checkers it
implies); and a property: histories generated from a correct in-memory model of
replicated logs, a producer per process and a consumer group with eager rebalances and
read_committed polls, never yield an anomaly."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from kafka_checkers import CONTROL, ReplicaLog, check_all, main, read_replicas, write_replicas
from kafka_history import History, read_history

K = "t-0"
J = "t-1"


class Script:
    """A history written by hand, one operation after another."""

    def __init__(self, path: Path | None = None) -> None:
        self.history = History(path, meta={"seed": 1})

    def send(self, process: str, key: str, value: str, offset: int | None, outcome: str = "ok"):
        invocation = self.history.invoke(process, "send", {"key": key, "value": value})
        extra = {"offset": offset} if offset is not None else {}
        self.history.complete(invocation, outcome, extra)  # type: ignore[arg-type]
        return self

    def poll(self, process: str, *records: tuple[str, int, str]):
        invocation = self.history.invoke(process, "poll")
        self.history.complete(invocation, "ok", {"records": [list(r) for r in records]})
        return self

    def commit(self, process: str, offsets: dict[str, int], outcome: str = "ok"):
        invocation = self.history.invoke(process, "commit")
        self.history.complete(invocation, outcome, {"offsets": offsets})  # type: ignore[arg-type]
        return self

    def assign(self, process: str, *keys: str):
        self.history.event(process, "assign", {"keys": list(keys)})
        return self

    def revoke(self, process: str, *keys: str):
        self.history.event(process, "revoke", {"keys": list(keys), "lost": False})
        return self

    def txn(self, process: str, txn_id: str, sends: list[tuple[str, str, int | None]], outcome):
        invocation = self.history.invoke(
            process, "txn", {"txn_id": txn_id, "sends": [[k, v] for k, v, _ in sends]}
        )
        self.history.complete(invocation, outcome, {"sends": [list(s) for s in sends]})
        return self


def failing(results) -> dict[str, dict[str, int]]:  # type: ignore[no-untyped-def]
    return {name: r.counts for name, r in results.items() if not r.ok}


def replica(broker: int, values: list[str], key: str = K) -> ReplicaLog:
    return ReplicaLog(key, broker, 0, len(values), list(enumerate(values)))


def clean_script() -> Script:
    script = Script().assign("c0", K)
    for offset in range(5):
        script.send("p0", K, f"a{offset}", offset)
    script.poll("c0", (K, 0, "a0"), (K, 1, "a1"), (K, 2, "a2"))
    script.commit("c0", {K: 3})
    script.poll("c0", (K, 3, "a3"), (K, 4, "a4"))
    return script.commit("c0", {K: 5})


def test_a_clean_history_has_no_anomaly() -> None:
    values = [f"a{o}" for o in range(5)]
    results = check_all(clean_script().history.ops(), [replica(1, values), replica(2, values)])
    assert failing(results) == {}
    assert all(r.examples == [] and r.count == 0 for r in results.values())


def test_a_lost_write_is_an_acked_send_below_the_highest_poll_that_nobody_read() -> None:
    script = Script().assign("c0", K)
    for offset in range(5):
        script.send("p0", K, f"a{offset}", offset)
    script.poll("c0", (K, 0, "a0"), (K, 1, "a1"))
    script.revoke("c0", K).assign("c1", K)  # c1 starts afresh: no poll skips offset 2
    script.poll("c1", (K, 3, "a3"), (K, 4, "a4"))
    results = check_all(script.history.ops())
    assert failing(results) == {
        "lost_writes": {"unread-below-max-poll": 1},
        "unseen_writes": {"unseen": 1},
    }
    [example] = results["lost_writes"].examples
    assert (example["value"], example["offset"], example["max_polled"]) == ("a2", 2, 4)


def test_an_acked_send_missing_from_a_replica_log_is_lost() -> None:
    script = clean_script()
    results = check_all(
        script.history.ops(), [replica(1, ["a0", "a1", "a2", "a3", "a4"]), replica(2, ["a0"])]
    )
    assert failing(results) == {"lost_writes": {"not-in-replica-log": 4}}
    assert {e["broker"] for e in results["lost_writes"].examples} == {2}


def test_an_unseen_write_is_acked_but_never_polled() -> None:
    script = clean_script().send("p0", K, "a5", 5)
    assert failing(check_all(script.history.ops())) == {"unseen_writes": {"unseen": 1}}


def test_a_duplicate_is_one_value_at_two_offsets() -> None:
    script = Script().assign("c0", K)
    script.send("p0", K, "a0", 0).send("p0", K, "a1", 1).send("p0", K, "a2", 3)
    script.poll("c0", (K, 0, "a0"), (K, 1, "a1"), (K, 2, "a1"), (K, 3, "a2"))
    results = check_all(script.history.ops())
    assert failing(results) == {"duplicates": {"same-value-at-two-offsets": 1}}
    assert results["duplicates"].examples[0]["at"] == [(K, 1), (K, 2)]


def test_one_offset_holding_two_values_over_time() -> None:
    script = Script().assign("c0", K)
    for offset in range(3):
        script.send("p0", K, f"a{offset}", offset)
    script.send("p1", K, "x2", None, outcome="info")  # unknown outcome, no offset
    script.poll("c0", (K, 0, "a0"), (K, 1, "a1"), (K, 2, "a2"))
    script.revoke("c0", K).assign("c1", K)
    script.poll("c1", (K, 2, "x2"))
    results = check_all(script.history.ops())
    assert failing(results) == {"inconsistent_offsets": {"two-values-at-one-offset": 1}}
    [example] = results["inconsistent_offsets"].examples
    assert (example["offset"], sorted(example["values"])) == (2, ["a2", "x2"])


def test_a_replica_holding_another_value_at_a_polled_offset() -> None:
    results = check_all(clean_script().history.ops(), [replica(1, ["a0", "a1", "b2", "a3", "a4"])])
    assert failing(results) == {
        "inconsistent_offsets": {"two-values-at-one-offset": 1},
        "lost_writes": {"not-in-replica-log": 1},
    }


def test_a_nonmonotonic_send() -> None:
    script = Script().assign("c0", K)
    script.send("p0", K, "a0", 0).send("p0", K, "a1", 2).send("p0", K, "a2", 1)
    script.poll("c0", (K, 0, "a0"), (K, 1, "a2"), (K, 2, "a1"))
    results = check_all(script.history.ops())
    assert failing(results) == {"nonmonotonic_sends": {"send-went-back": 1}}
    assert results["nonmonotonic_sends"].examples[0]["values"] == ["a1", "a2"]


def test_a_poll_skip_between_two_polls() -> None:
    script = Script().assign("c0", K)
    for offset in range(5):
        script.send("p0", K, f"a{offset}", offset)
    script.poll("c0", (K, 0, "a0"), (K, 1, "a1"))
    script.poll("c0", (K, 3, "a3"), (K, 4, "a4"))
    script.revoke("c0", K).assign("c1", K).poll("c1", (K, 2, "a2"))
    results = check_all(script.history.ops())
    assert failing(results) == {"poll_order": {"skip": 1}}
    assert results["poll_order"].examples[0]["skipped_offsets"] == [2]


def test_a_poll_going_back_without_a_rebalance() -> None:
    script = Script().assign("c0", K)
    for offset in range(3):
        script.send("p0", K, f"a{offset}", offset)
    script.poll("c0", (K, 0, "a0"), (K, 1, "a1"), (K, 2, "a2"))
    script.poll("c0", (K, 1, "a1"), (K, 2, "a2"))
    assert failing(check_all(script.history.ops())) == {"poll_order": {"nonmonotonic": 1}}


def test_a_poll_going_back_after_a_rebalance_is_not_an_anomaly() -> None:
    script = Script().assign("c0", K)
    for offset in range(3):
        script.send("p0", K, f"a{offset}", offset)
    script.poll("c0", (K, 0, "a0"), (K, 1, "a1"), (K, 2, "a2"))
    script.revoke("c0", K).assign("c0", K)  # restarts from the committed offset, 0
    script.poll("c0", (K, 0, "a0"), (K, 1, "a1"), (K, 2, "a2"))
    assert failing(check_all(script.history.ops())) == {}


def test_a_skip_inside_one_poll() -> None:
    script = Script().assign("c0", K, J)
    for offset in range(4):
        script.send("p0", K, f"a{offset}", offset)
    script.send("p0", J, "b0", 0)
    script.poll("c0", (K, 0, "a0"), (J, 0, "b0"), (K, 1, "a1"), (K, 3, "a3"))
    script.revoke("c0", K, J).assign("c1", K).poll("c1", (K, 2, "a2"))
    results = check_all(script.history.ops())
    assert failing(results) == {"poll_order": {"internal-skip": 1}}


def test_committed_offsets_going_backwards_in_real_time() -> None:
    script = clean_script().commit("c1", {K: 3})
    results = check_all(script.history.ops())
    assert failing(results) == {"commits_backwards": {"commit-below-acknowledged-commit": 1}}
    assert results["commits_backwards"].examples[0]["offsets"] == [5, 3]


def test_concurrent_commits_may_complete_in_any_order() -> None:
    script = clean_script()
    history = script.history
    high = history.invoke("c0", "commit")
    low = history.invoke("c1", "commit")
    history.complete(high, "ok", {"offsets": {K: 5}})
    history.complete(low, "ok", {"offsets": {K: 5}})
    failed = history.invoke("c1", "commit")
    history.complete(failed, "fail", {"offsets": {K: 2}})  # refused: not a commit
    assert failing(check_all(history.ops())) == {}


def test_replicas_differing_below_their_common_end() -> None:
    # a control record on one replica where the other has a record nobody wrote or read
    ops = clean_script().history.ops()
    values = [f"a{o}" for o in range(5)]
    b1 = ReplicaLog(K, 1, 0, 7, [*enumerate(values), (5, CONTROL), (6, "late")])
    b2 = ReplicaLog(K, 2, 0, 6, [*enumerate(values), (5, "stray")])
    results = check_all(ops, [b1, b2])
    assert failing(results) == {"replica_divergence": {"replicas-differ-below-common-end": 1}}
    [example] = results["replica_divergence"].examples
    assert (example["offset"], example["common_end"]) == (5, 6)
    assert example["values"] == {1: CONTROL, 2: "stray"}


def test_a_diverged_replica_of_polled_records_is_also_inconsistent_and_lost() -> None:
    values = [f"a{o}" for o in range(5)]
    results = check_all(
        clean_script().history.ops(),
        [replica(1, values), replica(2, ["a0", "a1", "c2", "c3", "a4"])],
    )
    assert failing(results) == {
        "replica_divergence": {"replicas-differ-below-common-end": 2},
        "inconsistent_offsets": {"two-values-at-one-offset": 2},
        "lost_writes": {"not-in-replica-log": 2},
    }


def test_read_committed_polls_skip_aborted_records_and_markers() -> None:
    script = Script().assign("c0", K)
    script.send("p0", K, "a0", 0)
    script.txn("tx", "t1", [(K, "x1", 1), (K, "x2", 2)], "fail")  # marker at 3
    script.txn("tx", "t2", [(K, "y4", 4)], "ok")  # marker at 5
    script.poll("c0", (K, 0, "a0"), (K, 4, "y4"))
    logs = [
        ReplicaLog(
            K, b, 0, 6, [(0, "a0"), (1, "x1"), (2, "x2"), (3, CONTROL), (4, "y4"), (5, CONTROL)]
        )
        for b in (1, 2)
    ]
    assert failing(check_all(script.history.ops(), logs)) == {}


def test_a_transaction_of_unknown_outcome_skipped_by_read_committed_polls() -> None:
    script = Script().assign("c0", K)
    script.send("p0", K, "a0", 0)
    script.txn("tx", "t1", [(K, "x1", 1)], "info")  # aborted after all; marker at 2
    script.send("p0", K, "a3", 3)
    script.poll("c0", (K, 0, "a0"), (K, 3, "a3"))
    logs = [ReplicaLog(K, 1, 0, 4, [(0, "a0"), (1, "x1"), (2, CONTROL), (3, "a3")])]
    assert failing(check_all(script.history.ops(), logs)) == {}


def test_an_aborted_read() -> None:
    script = Script().assign("c0", K)
    script.send("p0", K, "a0", 0)
    script.txn("tx", "t1", [(K, "x1", None)], "fail")
    script.poll("c0", (K, 0, "a0"), (K, 1, "x1"))
    results = check_all(script.history.ops())
    assert failing(results) == {"aborted_reads": {"aborted": 1}}
    assert results["aborted_reads"].examples[0]["value"] == "x1"


def test_a_read_of_a_value_nobody_sent() -> None:
    script = Script().assign("c0", K).send("p0", K, "a0", 0)
    script.poll("c0", (K, 0, "a0"), (K, 1, "ghost"))
    assert failing(check_all(script.history.ops())) == {"aborted_reads": {"never-written": 1}}


def test_the_jsonl_history_rechecks_offline(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "history.jsonl"
    script = clean_script()
    written = Script(path)
    for op in script.history.ops():  # the same operations, through a file
        written.history.event(op.process, op.f, op.value, op.type)
    written.history.close()
    with open(path, "a") as out:
        out.write('{"index": 99, "ti')  # a run killed mid-line
    meta, ops = read_history(path)
    assert meta == {"seed": 1}
    assert [(o.process, o.type, o.f, o.value) for o in ops] == [
        (o.process, o.type, o.f, o.value) for o in script.history.ops()
    ]
    replicas = tmp_path / "replicas.json"
    write_replicas(replicas, [replica(1, ["a0", "a1", "a2", "a3", "a4"]), replica(2, ["a0"])])
    assert read_replicas(replicas)[1] == replica(2, ["a0"])
    assert main([str(path)]) == 0
    assert main([str(path), str(replicas)]) == 1
    out = capsys.readouterr().out
    assert "lost writes: not-in-replica-log 4" in out
    assert json.dumps({"seed": 1}) in out


# ---------------------------------------------------------------------------
# A correct model never yields an anomaly


@dataclass
class Model:
    """Replicated logs that agree, idempotent producers, a read_committed consumer group
    with eager rebalances, all driven sequentially, recorded into a history."""

    keys: list[str]
    consumers: list[str]
    history: History = field(default_factory=History)
    logs: dict[str, list[str]] = field(default_factory=dict)  # key -> values (CONTROL too)
    aborted: set[str] = field(default_factory=set)
    committed: dict[str, int] = field(default_factory=dict)
    owner: dict[str, str] = field(default_factory=dict)
    position: dict[str, int] = field(default_factory=dict)
    next_value: int = 0

    def __post_init__(self) -> None:
        self.logs = {k: [] for k in self.keys}
        self.rebalance(0)

    def value(self) -> str:
        self.next_value += 1
        return f"v{self.next_value}"

    def send(self, producer: int, key: int, outcome: str) -> None:
        k, value = self.keys[key % len(self.keys)], self.value()
        invocation = self.history.invoke(f"p{producer}", "send", {"key": k, "value": value})
        if outcome == "fail":  # certainly not written
            self.history.complete(invocation, "fail")
            return
        self.logs[k].append(value)
        offset = len(self.logs[k]) - 1
        self.history.complete(invocation, outcome, {"offset": offset} if outcome == "ok" else {})  # type: ignore[arg-type]

    def txn(self, producer: int, key_choices: list[int], commit: bool) -> None:
        sends = [(self.keys[i % len(self.keys)], self.value()) for i in key_choices]
        invocation = self.history.invoke(
            f"tx{producer}", "txn", {"txn_id": f"tx{producer}", "sends": [list(s) for s in sends]}
        )
        done = []
        for k, value in sends:
            self.logs[k].append(value)
            done.append([k, value, len(self.logs[k]) - 1])
            if not commit:
                self.aborted.add(value)
        for k in {k for k, _ in sends}:
            self.logs[k].append(CONTROL)
        self.history.complete(invocation, "ok" if commit else "fail", {"sends": done})

    def rebalance(self, seed: int) -> None:
        """Eager: every member loses everything, then the new assignment starts from the
        committed offsets."""
        for consumer in self.consumers:
            held = [k for k, c in self.owner.items() if c == consumer]
            if held:
                self.history.event(consumer, "revoke", {"keys": held, "lost": False})
        self.owner = {
            k: self.consumers[(i + seed) % len(self.consumers)] for i, k in enumerate(self.keys)
        }
        for consumer in self.consumers:
            held = [k for k, c in self.owner.items() if c == consumer]
            self.history.event(consumer, "assign", {"keys": held})
            for k in held:
                self.position[k] = self.committed.get(k, 0)

    def poll(self, consumer: int, limit: int) -> None:
        name = self.consumers[consumer % len(self.consumers)]
        invocation = self.history.invoke(name, "poll")
        records = []
        for k in (k for k, c in self.owner.items() if c == name):
            log = self.logs[k]
            while self.position[k] < len(log) and len(records) < limit:
                value = log[self.position[k]]
                if value != CONTROL and value not in self.aborted:
                    records.append([k, self.position[k], value])
                self.position[k] += 1
        self.history.complete(invocation, "ok", {"records": records})

    def commit(self, consumer: int) -> None:
        name = self.consumers[consumer % len(self.consumers)]
        invocation = self.history.invoke(name, "commit")
        offsets = {k: self.position[k] for k, c in self.owner.items() if c == name}
        self.committed.update(offsets)
        self.history.complete(invocation, "ok", {"offsets": offsets})

    def drain(self) -> None:
        for consumer in range(len(self.consumers)):
            self.poll(consumer, 10**9)

    def replicas(self, count: int) -> list[ReplicaLog]:
        return [
            ReplicaLog(k, broker, 0, len(log), list(enumerate(log)))
            for k, log in self.logs.items()
            for broker in range(1, count + 1)
        ]


actions = st.one_of(
    st.tuples(
        st.just("send"),
        st.integers(0, 2),
        st.integers(0, 2),
        st.sampled_from(["ok", "ok", "ok", "info", "fail"]),
    ),
    st.tuples(
        st.just("txn"),
        st.integers(0, 1),
        st.lists(st.integers(0, 2), min_size=1, max_size=3),
        st.booleans(),
    ),
    st.tuples(st.just("poll"), st.integers(0, 2), st.integers(1, 5)),
    st.tuples(st.just("commit"), st.integers(0, 2)),
    st.tuples(st.just("rebalance"), st.integers(0, 2)),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(actions, max_size=60), st.integers(1, 3))
def test_histories_of_a_correct_model_have_no_anomaly(steps, replicas: int) -> None:  # type: ignore[no-untyped-def]
    model = Model(keys=[K, J, "u-0"], consumers=["c0", "c1", "c2"])
    for step in steps:
        getattr(model, step[0])(*step[1:])
    model.drain()
    assert failing(check_all(model.history.ops(), model.replicas(replicas))) == {}
