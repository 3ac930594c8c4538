"""Cluster mode (in progress): metadata on etcd. Nothing else imports this yet."""
