"""Agent functions the gateway tests run (``task.name=agent:gateway_agents:<name>``): each plays an
episode with the ``openai`` SDK or the OpenAI Agents SDK, unmodified, through the gateway. Each
puts a marker in its system prompt, so that a test can tell its episodes apart in what was trained."""

import itertools

CALCULATOR = {"type": "function", "function": {
    "name": "calculate", "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}

MARKERS = {"three_turns": "Mode A.", "rewrite": "Mode B.", "retry": "Mode C.", "agents_sdk": "Mode D."}


def system(kind: str) -> dict:
    return {"role": "system", "content": f"{MARKERS[kind]} You are a helpful assistant. Answer in one short sentence."}


def tool_results(message) -> list[dict]:
    """The tool messages answering ``message`` (one even when it called none: a result between every turn)."""
    calls = message.tool_calls or []
    return [{"role": "tool", "tool_call_id": call.id, "content": "42"} for call in calls] or [
        {"role": "tool", "tool_call_id": "none", "content": "no tool was called"}]


async def ask(client, messages):
    answer = await client.chat.completions.create(model="policy", messages=messages, tools=[CALCULATOR], max_tokens=64)
    return answer.choices[0].message


def reward(example, message) -> float:
    return float(example.answer in (message.content or ""))


async def three_turns(example, client) -> float:
    """Three calls, each extending the last with a tool result: one segment of three turns."""
    messages = [system("three_turns"), {"role": "user", "content": f"What is {example.prompt}"}]
    for _ in range(3):
        message = await ask(client, messages)
        messages += [message.model_dump(exclude_none=True), *tool_results(message)]
    return reward(example, message)


async def rewrite(example, client) -> float:
    """Two calls, then the history rewritten (the first reply summarised away): two segments."""
    messages = [system("rewrite"), {"role": "user", "content": f"What is {example.prompt}"}]
    first = await ask(client, messages)
    messages += [first.model_dump(exclude_none=True), *tool_results(first)]
    await ask(client, messages)
    summary = [system("rewrite"), {"role": "user", "content": f"Earlier you looked into {example.prompt}. Say the answer."}]
    return reward(example, await ask(client, summary))


async def retry(example, client) -> float:
    """A call sent twice (the harness retried it), then one more turn: the first answer is never trained."""
    messages = [system("retry"), {"role": "user", "content": f"What is {example.prompt}"}]
    await ask(client, messages)
    again = await ask(client, messages)
    messages += [again.model_dump(exclude_none=True), *tool_results(again)]
    return reward(example, await ask(client, messages))


async def agents_sdk(example, client) -> float:
    """The OpenAI Agents SDK: an ``Agent`` with one function tool, run by its ``Runner``."""
    from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
    from agents.exceptions import MaxTurnsExceeded

    set_tracing_disabled(True)  # its traces would go to OpenAI's servers

    @function_tool
    def calculate(expression: str) -> str:
        """Evaluate an arithmetic expression."""
        return "42"

    agent = Agent(name="calculator", instructions=system("agents_sdk")["content"], tools=[calculate],
                  model=OpenAIChatCompletionsModel(model="policy", openai_client=client),
                  model_settings=ModelSettings(max_tokens=64))
    try:
        result = await Runner.run(agent, f"What is {example.prompt}", max_turns=3)
    except MaxTurnsExceeded:
        return 0.0
    return float(example.answer in str(result.final_output))


#: Three-turn episodes most often: one is trained as a single sequence only when all three of its replies
#: ended within their budget (a reply cut short does not continue).
_kinds = itertools.cycle(["three_turns", "agents_sdk", "three_turns", "rewrite", "three_turns", "retry"])


async def scripted(example, client) -> float:
    """Each episode the next kind of :data:`MARKERS` in turn."""
    return await globals()[next(_kinds)](example, client)
