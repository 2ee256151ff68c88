"""The rollout worker (``echo2 worker``): registers, fetches versions, leases work, samples it and
submits; it never sees a reward.

* ``worker.py`` — the worker process around ``core/worker_protocol.py``: register, heartbeats,
  the main loop; a lease its engine fails on handed back, never the process's end;
* ``options.py`` — ``WorkerOptions``, a worker's options as one typed object;
* ``client.py`` — the coordinator's HTTP client: timeouts, retries with back-off, clear messages;
* ``weights.py`` — the worker's weights: fetch, background staging, swap-in, cancel on a lost
  session;
* ``lease_generation.py`` — one lease's work through one sampling path into its submissions (a
  single-turn task's groups handed over one by one as their rows finish, ``GroupStream``);
  ``timeline.py`` — the worker's timeline events;
* ``courier.py`` — the submissions on a thread of their own (a lease's parts at once, its final one
  after the lease before it is answered); ``lease_ahead.py`` — the next lease
  asked for while this one generates;
* ``engines/`` — what a worker samples with and loads versions into (``hf``, ``vllm``, one's own).

**The protocols (Echo).** ``sync`` / ``pull`` (sequential pull): before every lease the worker asks
for the current version and downloads it if newer (blocking). ``async`` (push-pull): the coordinator
announces the newest version in every heartbeat and lease reply; a background thread of the worker
(``weights.py``) downloads it while the main thread generates, and the new weights are swapped in
between two requests. The first weights (and the first after registering anew) come by a blocking
fetch, with no background fetch beside it: the two had downloaded the same version at once, doubling
the learner's upload just when a healed partition brings every worker back. "Push" is an
announcement: nothing ever has to connect *to* a worker, so workers behind NAT work. The decisions
are :mod:`echo2.core.worker_protocol`'s, the simulated worker's too. ``emulation.fetch_delay_s`` adds
a fixed delay to every weight transfer (a slow link: the version requested is the one that arrives,
later), so benchmarks can show what overlap buys when dissemination is slow.

**Engines.** ``rollout.engine: hf`` (default) samples in the worker process with
:mod:`echo2.model.sampling` on ``workers.device``; on CUDA through ``decoding.StaticDecoder`` (a
captured graph per lease shape over a static KV cache, kept valid across versions because weights are
copied into the same parameter tensors). ``vllm`` generates with vLLM
(``logprobs_mode="processed_logprobs"``, so the returned log-prob of each sampled token is under
``softmax(logits / T)``), loads each verified full version in place through a vLLM worker extension
calling ``model.load_weights``, then resets the prefix cache; a LoRA version becomes a peft adapter
folder served as a new ``LoRARequest``, and so does each sampler of a training service's bundle (the
folders are tested on CPU against peft's own loader and the hf engine's merge). Every kind of work
reaches an engine through its one ``Engine.sample(sampler, prompt_ids, params, draws)``
(``engines/__init__.py``), so ``echo2 serve`` and agent runs may use either engine. Without vLLM or a
GPU the worker fails with one line saying so. The vLLM path has not been run on a GPU yet; its GPU
test skips without one.

**Rejoining a resumed run.** Workers learn that the coordinator forgot them from a 401 on their
session credential (a learner resumed with ``--resume``; a 410 when it declared them dead:
``SessionLost``, on a heartbeat or any request) and register again, keeping only the versions whose hashes the
coordinator announces now — the newest, and a delta run's catch-up bases (``weights.vouched_hashes``,
``ChunkStore.retain``) — and dropping the rest (version numbers repeat after a resume, with other
weights, so a resumed learner's versions match nothing held). A worker declared dead over a partition
or a pause thus loads the version it held from its own store, or resumes a download cut off midway,
rather than downloading the model again (``tests/live/test_rejoin_live.py``). It cancels at once a fetch
still after a version the dead learner announced, and the wait for it (``WorkerWeights.cancel``).
"""
