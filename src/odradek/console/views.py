"""What each page shows, as plain data: the JSON API returns it as it is, and ``pages``
renders the same dicts as HTML, so a script and a person see the same facts.

The views of groups and the cluster read only the ``Model`` (no request to the
cluster); lag history reads the ``LagStore``. Topic details, messages and offset resets
ask the cluster, through ``ConsoleService`` (blocking calls: the app runs them in a
thread).
"""

from __future__ import annotations

import math
from typing import Any

from odradek.console import rebalances as rb
from odradek.console.lagstore import LagStore
from odradek.console.model import Group, Model, partition_rows

PAGE_SIZES = (25, 50, 100, 500)
DEFAULT_PAGE_SIZE = 50
PARTITIONS_PAGE = 200  # partitions per page of a group's offsets table
MEMBERS_PAGE = 200
LANES_SHOWN = 40  # swimlanes drawn (the members with the most recent changes)
PICKER_LIMIT = 200  # partitions offered by name in the lag chart's picker


def tp_name(tp: tuple[str, int]) -> str:
    return f"{tp[0]}-{tp[1]}"


def _tps(tps: Any) -> list[dict[str, Any]]:
    return [{"topic": t, "partition": p} for t, p in tps]


def groups_view(
    model: Model,
    *,
    query: str = "",
    sort: str = "group",
    order: str = "asc",
    page: int = 1,
    size: int = DEFAULT_PAGE_SIZE,
) -> dict[str, Any]:
    size = size if size in PAGE_SIZES else DEFAULT_PAGE_SIZE
    total, rows = model.list_groups(query, sort, order == "desc", page, size)
    pages = max(math.ceil(total / size), 1)
    return {
        "query": query,
        "sort": sort,
        "order": "desc" if order == "desc" else "asc",
        "page": max(min(page, pages), 1),
        "pages": pages,
        "size": size,
        "total": total,
        "all_groups": model.group_count(),
        "groups": [r.as_dict() for r in rows],
        "feed": feed_status(model),
    }


def feed_status(model: Model) -> dict[str, Any]:
    return {
        "offsets_topic": model.tail_state,
        "offsets_topic_readable": model.tail_readable,
        "rebalances_from": "events" if model.events_seen else "inferred",
        "cluster_error": model.cluster.error,
    }


def _verdict(g: Group) -> dict[str, Any] | None:
    v = g.verdict
    if v is None:
        return None
    return {
        "verdict": v.verdict.name,
        "worst": v.worst.name,
        "label": v.label,
        "partitions": dict(v.counts),
        "seconds_to_clear": v.seconds_to_clear,
    }


def group_view(
    model: Model, g: Group, *, partitions: tuple[int, int | None] = (0, None)
) -> dict[str, Any]:
    """The group; ``partitions`` (start, stop) limits the partition rows (a page of them:
    the totals still cover all)."""
    with model.lock:
        consumer = g.group_type == "consumer"
        members_src = g.members if g.members_known or not g.consumer_members else g.consumer_members
        members = []
        for m in sorted(members_src.values(), key=lambda m: m.member_id):
            entry: dict[str, Any] = {
                "member_id": m.member_id,
                "instance_id": m.instance_id,
                "client_id": m.client_id,
                "host": m.host,
                "assignment": _tps(m.assignment),
            }
            if consumer:
                target = m.target if m.target is not None else m.assignment
                entry["member_epoch"] = m.epoch
                entry["member_type"] = m.member_type
                entry["target_assignment"] = _tps(target)
                entry["to_revoke"] = _tps(sorted(set(m.assignment) - set(target)))
                entry["to_receive"] = _tps(sorted(set(target) - set(m.assignment)))
            members.append(entry)
        count, rows = partition_rows(model, g, *partitions)
        return {
            "group": g.group_id,
            "state": g.state,
            "protocol": g.protocol_label,
            "protocol_type": g.protocol_type or None,
            "assignor": g.assignor or None,
            "generation": g.generation,
            "epoch_name": "group epoch" if consumer else "generation",
            "coordinator": g.coordinator,
            "members": members,
            "partitions": rows,
            "partitions_from": partitions[0],
            "totals": {"lag": None if g.lag < 0 else g.lag, "partitions": count},
            "verdict": _verdict(g),
            "feed": feed_status(model),
        }


def rebalances_view(model: Model, g: Group, *, lanes_shown: int = LANES_SHOWN) -> dict[str, Any]:
    now = model.now_ms()
    spans = model.spans(g)
    with model.lock:
        changes = list(g.ownership)
        eager = g.group_type != "consumer" and g.assignor not in rb.COOPERATIVE_ASSIGNORS
    # The members whose ownership changed last are the ones a reader is looking for; at
    # 1,000 members, only those get a lane.
    last: dict[str, int] = {}
    for c in changes:
        last[c.member] = c.at_ms
    shown = set(sorted(last, key=lambda m: last[m], reverse=True)[:lanes_shown])
    lanes = rb.lanes([c for c in changes if c.member in shown], spans, eager=eager, now_ms=now)
    lanes.sort(key=lambda lane: last.get(lane.member, 0), reverse=True)
    out_spans = []
    for s in spans:
        d = s.as_dict()
        d["stopped_partitions"] = _tps(rb.stopped_partitions(changes, s, eager=eager))
        out_spans.append(d)
    return {
        "group": g.group_id,
        "source": "events" if g.event_slots else "inferred",
        "eager": eager,
        "now_ms": now,
        "rebalances": out_spans,
        "members_with_lanes": len(last),
        "lanes": [
            {
                "member": lane.member,
                "segments": [
                    {
                        "start_ms": seg.start_ms,
                        "end_ms": seg.end_ms,
                        "partitions": _tps(seg.partitions),
                        "stopped": seg.stopped,
                    }
                    for seg in lane.segments
                ],
            }
            for lane in lanes
        ],
    }


def lag_view(
    model: Model,
    store: LagStore | None,
    g: Group,
    since_ms: int,
    *,
    partitions: bool = True,
    partition: str | None = None,
    verdicts: int | None = None,
) -> dict[str, Any]:
    """The group's lag samples since ``since_ms``: totals, and every partition's lag
    (``partitions``) or one partition's series (``partition``, "topic-N"); the first
    ``verdicts`` partitions' verdicts (all by default)."""
    samples = store.series(g.group_id, since_ms, partitions=partitions) if store else []
    out = []
    for s in samples:
        entry: dict[str, Any] = {"at_ms": s.at_ms, "lag": s.lag}
        if partitions:
            entry["partitions"] = {
                tp_name(tp): (max(end - c, 0) if c >= 0 and end >= 0 else None)
                for tp, (c, end) in s.offsets.items()
            }
        out.append(entry)
    chosen: list[list[Any]] | None = None
    if partition and store is not None:
        topic, _, number = partition.rpartition("-")
        if topic and number.isdigit():
            chosen = [
                [at, lag]
                for at, lag in store.partition_series(g.group_id, (topic, int(number)), since_ms)
            ]
    with model.lock:
        verdict = _verdict(g)
        judged = sorted(g.partition_verdicts)
        per_partition = {
            tp_name(tp): {
                "verdict": g.partition_verdicts[tp].verdict.name,
                "seconds_to_clear": g.partition_verdicts[tp].seconds_to_clear,
            }
            for tp in judged[:verdicts]
        }
    return {
        "group": g.group_id,
        "since_ms": since_ms,
        "now_ms": model.now_ms(),
        "samples": out,
        "partition": partition if chosen is not None else None,
        "partition_samples": chosen,
        "verdict": verdict,
        "partitions": per_partition,
        "partitions_judged": len(judged),
        "partition_names": [tp_name(tp) for tp in judged[:PICKER_LIMIT]],
        "stored": store is not None,
    }


def topics_view(model: Model) -> dict[str, Any]:
    with model.lock:
        c = model.cluster
        by_topic: dict[str, list[Any]] = {}
        for info in c.partitions.values():
            by_topic.setdefault(info.topic, []).append(info)
        topics = []
        for name in sorted(by_topic):
            parts = by_topic[name]
            topics.append(
                {
                    "topic": name,
                    "internal": name in c.internal,
                    "partitions": len(parts),
                    "replication_factor": max((len(p.replicas) for p in parts), default=0),
                    "under_replicated": sum(1 for p in parts if len(p.isr) < len(p.replicas)),
                    "offline": sum(1 for p in parts if p.leader < 0),
                }
            )
    return {"topics": topics, "feed": feed_status(model)}


def cluster_view(model: Model) -> dict[str, Any]:
    with model.lock:
        c = model.cluster
        brokers = [
            {
                "id": node,
                "host": host,
                "port": port,
                "rack": rack,
                "controller": node == c.controller,
                "leaders": sum(1 for p in c.partitions.values() if p.leader == node),
                "replicas": sum(1 for p in c.partitions.values() if node in p.replicas),
            }
            for node, (host, port, rack) in sorted(c.brokers.items())
        ]
        known = set(c.brokers)
        missing = sorted(
            {r for p in c.partitions.values() for r in p.replicas if r not in known} | set(c.gone)
        )

        def partition(p: Any) -> dict[str, Any]:
            return {
                "topic": p.topic,
                "partition": p.partition,
                "leader": p.leader,
                "leader_epoch": p.leader_epoch,
                "replicas": list(p.replicas),
                "isr": list(p.isr),
            }

        ordered = sorted(c.partitions.values(), key=lambda p: (p.topic, p.partition))
        return {
            "cluster_id": c.cluster_id,
            "controller": c.controller,
            "brokers": brokers,
            "missing_brokers": [{"id": node, "last_seen_ms": c.gone.get(node)} for node in missing],
            "partitions": len(c.partitions),
            "under_replicated": [
                partition(p) for p in ordered if len(p.isr) < len(p.replicas) and p.leader >= 0
            ],
            "offline": [partition(p) for p in ordered if p.leader < 0],
            "elections": [
                {
                    "at_ms": e.at_ms,
                    "topic": e.topic,
                    "partition": e.partition,
                    "old_leader": e.old_leader,
                    "new_leader": e.new_leader,
                    "leader_epoch": e.leader_epoch,
                }
                for e in reversed(c.elections)
            ],
            "updated_ms": c.updated_ms,
            "feed": feed_status(model),
        }
