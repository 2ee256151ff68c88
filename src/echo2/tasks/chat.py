"""Prompts rendered with an instruct model's own chat template.

An instruct model answers best when asked the way it was tuned: its chat template wraps a system
message and the user's question and ends where the assistant's turn begins. Tasks render their
prompts as text this way on the learner (the coordinator hands the text out); workers tokenize
that text like any prompt and never render it themselves.
"""

from __future__ import annotations

from functools import cached_property


class ChatPrompt:
    """Renders a user message with the chat template of ``template_source``.

    ``template_source`` is any ``model.name`` (:mod:`echo2.model_sources`: a named source such as
    ``smollm2-135m-instruct``, a GGUF file, a folder or a hub id), normally the trained model.
    ``system_prompt`` None keeps the template's own default system message, if it has one.
    The tokenizer loads on first use, so a process that only scores completions never loads it.
    """

    def __init__(self, template_source: str, system_prompt: str | None = None) -> None:
        self.template_source, self.system_prompt = template_source, system_prompt

    @cached_property
    def _tokenizer(self):
        from transformers import AutoTokenizer

        from echo2.model_sources import resolve_model_path

        tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(self.template_source))
        if not tokenizer.chat_template:
            raise ValueError(f"chat_template={self.template_source!r}: its tokenizer has no chat template")
        return tokenizer

    def render(self, user: str) -> str:
        """The prompt text: system (when set) and user messages, then the assistant's turn opened."""
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt is not None else []
        messages.append({"role": "user", "content": user})
        return self._tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
