"""The request handlers, one module per API or per family of related APIs (``groups``
serves the classic group APIs, ``acls`` Describe/Create/DeleteAcls, ``transactions``
the transactional ones, ...); each handler registers itself with ``@handles`` in
``odradek.broker.registry``, so importing this package registers every handler."""

from odradek.broker.apis import (  # noqa: F401
    acls,
    admin_configs,
    alter_replica_log_dirs,
    api_versions,
    consumer_groups,
    delete_records,
    describe_cluster,
    describe_log_dirs,
    describe_quorum,
    describe_topic_partitions,
    fetch,
    groups,
    init_producer_id,
    leader_epochs,
    list_config_resources,
    list_offsets,
    metadata,
    partition_admin,
    produce,
    sasl,
    scram_credentials,
    topic_admin,
    transactions,
    write_txn_markers,
)
