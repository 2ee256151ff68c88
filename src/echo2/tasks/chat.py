"""Prompts and episode turns rendered with an instruct model's own chat template.

An instruct model answers best when asked the way it was tuned: its chat template wraps a system
message and the user's question and ends where the assistant's turn begins. Tasks render their
prompts as text this way on the learner (the coordinator hands the text out); workers tokenize
that text like any prompt and never render it themselves. In an episode, an environment's
message (a tool's result, feedback) is rendered the same way, as the text between the model's
end of turn and the start of its next one (:meth:`ChatPrompt.continuation`).
"""

from __future__ import annotations

from functools import cached_property


class ChatPrompt:
    """Renders a user message with the chat template of ``template_source``.

    ``template_source`` is any ``model.name`` (:mod:`echo2.model.sources`: a named source such as
    ``smollm2-135m-instruct``, a GGUF file, a folder or a hub id), normally the trained model.
    ``system_prompt`` None keeps the template's own default system message, if it has one.
    The tokenizer loads on first use, so a process that only scores completions never loads it.
    """

    def __init__(self, template_source: str, system_prompt: str | None = None) -> None:
        self.template_source, self.system_prompt = template_source, system_prompt

    @cached_property
    def _tokenizer(self):
        from transformers import AutoTokenizer

        from echo2.model.sources import resolve_model_path

        tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(self.template_source))
        if not tokenizer.chat_template:
            raise ValueError(f"chat_template={self.template_source!r}: its tokenizer has no chat template")
        return tokenizer

    def opening(self, user: str) -> list[dict[str, str]]:
        """The conversation's first messages: system (when set) and user."""
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt is not None else []
        return [*messages, {"role": "user", "content": user}]

    def render(self, user: str) -> str:
        """The prompt text: system (when set) and user messages, then the assistant's turn opened."""
        return self.render_messages(self.opening(user))

    @property
    def renders_tools(self) -> bool:
        """Whether the template has a tool format of its own (it reads a ``tools`` list)."""
        return "tools" in (self._tokenizer.chat_template or "")

    def render_messages(self, messages: list[dict[str, str]], tools: list[dict] | None = None) -> str:
        """A whole conversation's prompt text, the assistant's next turn opened; ``tools``: the tool
        schemas the template describes in its own format (:attr:`renders_tools`)."""
        return self._tokenizer.apply_chat_template(messages, tools=tools or None, tokenize=False,
                                                   add_generation_prompt=True)

    def continuation(self, conversation: list[dict[str, str]], messages: list[dict[str, str]],
                     tools: list[dict] | None = None) -> str:
        """The text inserted after the model's last turn of ``conversation`` (an assistant message
        the model ended with its end-of-turn token) to add ``messages`` (a tool result, feedback)
        and open the assistant's next turn: the template applied to the whole conversation, less
        what the model already holds (the conversation up to its last reply and that token).
        Workers insert these characters encoded on their own (:func:`echo2.model.episodes.observation_ids`):
        the model's own tokens are never re-encoded."""
        held = self.render_messages(conversation[:-1], tools) + conversation[-1]["content"] + self._tokenizer.eos_token
        whole = self.render_messages([*conversation, *messages], tools)
        if not whole.startswith(held):
            raise ValueError(f"the chat template of {self.template_source!r} does not render a conversation as the "
                             "start of its continuation (it rewrites earlier turns), so no episode can continue "
                             "it token for token")
        return whole[len(held):]
