"""The agent gateway: model calls of an agent's own harness served by the fleet, recorded token
for token, its episodes trained as groups (an agent is one more kind of work over the same books).

* ``api.py`` — the OpenAI-compatible routes (``/v1/chat/completions``, ``/v1/completions``,
  ``/v1/models``) and the episode routes, each key checked before a body byte is read;
* ``openai_wire.py`` — the OpenAI request and reply shapes, refusals by the setting's name;
* ``render.py`` — a conversation as the prompt ids the model sees, continued token for token;
* ``desk.py`` — a call leased to the fleet as sampling work, awaited on the event loop, audited;
* ``episodes.py`` — the run's agent episodes: G of one example make a group in the pacing window;
* ``trajectory.py`` — an episode's calls joined into segments, a retried turn abandoned;
* ``agents.py`` — the pool that plays the user's agent function on the run's episodes.

**Agent episodes** (``docs/agents.md``) turn the multi-turn episodes of :mod:`echo2.model.episodes`
around: the agent runs on the learner's host with its own harness and state and calls the model
through the gateway; each call is sampling work leased to a worker (no prompt leases at all:
``RunSpec.agent_calls``), and the gateway joins the calls into token-exact segments. A group's slot
is taken from the same pacing window when its first episode opens; its G rewarded episodes enter the
buffer as one ``Group`` whose rows are segments (their own prompt ids, each turn's version and
worker), trained with the episode's advantage and audited per worker. The run's side of it (the
work source, the episodes' books, the desk, the agent pool) is wired by
:class:`echo2.launch.agents.AgentRun`.
"""
