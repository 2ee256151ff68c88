"""Agent functions the gateway tests run (``task.name=agent:gateway_agents:<name>``): each plays an
episode with the ``openai`` SDK or the OpenAI Agents SDK, unmodified, through the gateway."""


CALCULATOR = {"type": "function", "function": {
    "name": "calculate", "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}}

SYSTEM = "You are a helpful assistant. Answer in one short sentence."


def tool_result(message) -> list[dict]:
    """The tool messages answering ``message`` (one even when it called none: a result between every turn)."""
    calls = message.tool_calls or []
    return [{"role": "tool", "tool_call_id": call.id, "content": "42"} for call in calls] or [
        {"role": "tool", "tool_call_id": "none", "content": "no tool was called"}]


async def three_turns(example, client) -> float:
    """Three calls, each extending the last with a tool result: one segment."""
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"What is {example.prompt}"}]
    for _ in range(3):
        answer = await client.chat.completions.create(model="policy", messages=messages, tools=[CALCULATOR],
                                                      max_tokens=40)
        message = answer.choices[0].message
        messages += [message.model_dump(exclude_none=True), *tool_result(message)]
    return float(example.answer in (message.content or ""))
