"""A local tokenizer folder with a chat template, for the tasks that render chat prompts."""

from __future__ import annotations

from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from transformers import PreTrainedTokenizerFast

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def chat_tokenizer(folder, template: str = CHATML) -> str:
    """A tokenizer folder with a chat template and an end-of-turn token (nothing else matters here)."""
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel({"<unk>": 0, "<|im_end|>": 1},
                                                                             unk_token="<unk>")),
                                        eos_token="<|im_end|>", unk_token="<unk>")
    tokenizer.chat_template = template
    tokenizer.save_pretrained(folder)
    return str(folder)

