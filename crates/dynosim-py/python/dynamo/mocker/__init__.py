"""``dynamo.mocker`` as dynosim provides it: the engine-argument classes of the reference.

``MockEngineArgs`` describes one simulated worker pool (engine type, KV capacity, batching
limits, ...); ``SglangArgs``, ``TrtllmArgs`` and ``ReasoningConfig`` are its sub-settings. They
are checked by the same Rust parser as the ``--extra-engine-args`` JSON of the command line.
Only these classes exist here: dynosim has no live mocker workers.
"""

from dynosim._dynosim import MockEngineArgs, ReasoningConfig, SglangArgs, TrtllmArgs

__all__ = ["MockEngineArgs", "ReasoningConfig", "SglangArgs", "TrtllmArgs"]
