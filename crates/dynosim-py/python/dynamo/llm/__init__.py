"""``dynamo.llm`` as dynosim provides it: ``KvRouterConfig``, the KV router's settings.

It is checked by the same Rust parser as the ``--router-config`` JSON of the command line
(``router_policy_config`` names a policy YAML file, read and checked when the object is built).
``AicPerfConfig`` is absent because dynosim has no AIC performance model yet.
"""

from dynosim._dynosim import KvRouterConfig

__all__ = ["KvRouterConfig"]
