"""Broker security: listeners with TLS and SASL, SCRAM credentials, ACLs.

``BrokerSecurity`` (``manager.py``) holds what the whole broker shares (the credential store,
the ACL store and authorizer, each listener's TLS context and SASL settings)
and opens a ``Session`` for every connection. Handlers ask the request
context (``ctx.authorize(...)``) and never this package directly.

Files, in ``<data dir>/security/``: ``scram-credentials.json`` and ``acls.json``.
"""
