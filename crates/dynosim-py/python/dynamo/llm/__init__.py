"""``dynamo.llm`` as dynosim provides it: ``KvRouterConfig``, the KV router's settings, and
``AicPerfConfig``, the AIC performance model's.

``KvRouterConfig`` is checked by the same Rust parser as the ``--router-config`` JSON of the
command line (``router_policy_config`` names a policy YAML file, read and checked when the
object is built); ``AicPerfConfig`` by the same checks as the ``--aic-*`` flags.
"""

from dynosim._dynosim import AicPerfConfig, KvRouterConfig

__all__ = ["AicPerfConfig", "KvRouterConfig"]
