"""One module per Kafka API; importing this package registers every handler."""

from odradek.broker.apis import (  # noqa: F401
    acls,
    admin_configs,
    api_versions,
    consumer_groups,
    delete_records,
    describe_cluster,
    describe_log_dirs,
    fetch,
    groups,
    init_producer_id,
    leader_epochs,
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
