"""echo2 as a Tinker-compatible RL service (``echo2 serve``): a client's own training loop — the
``tinker`` SDK, ``tinker-cookbook`` recipes — trains through echo2's learner. The routes
(:mod:`.api`) parse and encode with the SDK's own types and protobuf schema (:mod:`.wire`); the
service (:mod:`.service`) runs each training client's requests in order and once (:mod:`.turns`),
answering futures (:mod:`.futures`); training clients are LoRA adapters on the one base model,
trained with echo2's losses and update (:mod:`.training`); sessions release what a gone client held
(:mod:`.sessions`); saves are durable ``tinker://`` paths (:mod:`.checkpoints`). See docs/tinker.md."""
