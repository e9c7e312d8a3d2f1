"""Turning a conversation into prompt token ids.

Turn k is prompted with the questions so far and the model's own answers to the earlier turns, through
the tokenizer's chat template, or through a FastChat conversation template (``--template vicuna_v1.1``)
for models without one.
"""

from __future__ import annotations

from typing import Sequence

from specbench.errors import SpecbenchError


def fastchat_conversation():
    """FastChat's conversation module: an optional dependency, needed only for ``--template``."""
    try:
        from fastchat import conversation
    except ImportError:
        raise SpecbenchError("--template needs FastChat's conversation templates: "
                             "pip install 'specbench[fastchat]' (or pip install fschat)") from None
    return conversation


class PromptBuilder:
    def __init__(self, tokenizer, template: str | None = None) -> None:
        self.tokenizer = tokenizer
        self.template = template
        if template is not None:
            conv_templates = fastchat_conversation().conv_templates
            if template not in conv_templates:
                raise SpecbenchError(f"unknown FastChat template {template!r}; e.g. vicuna_v1.1, llama-2, chatml")
        elif not getattr(tokenizer, "chat_template", None):
            raise SpecbenchError("the model's tokenizer has no chat template; pass --template (e.g. vicuna_v1.1)")

    def build(self, questions: Sequence[str], answers: Sequence[str]) -> list[int]:
        """Prompt ids for turn ``len(questions)``; ``answers`` holds the model's earlier answers."""
        if len(answers) != len(questions) - 1:
            raise ValueError("need one answer for every earlier turn")
        if self.template is None:
            messages = []
            for i, question in enumerate(questions):
                messages.append({"role": "user", "content": question})
                if i < len(answers):
                    messages.append({"role": "assistant", "content": answers[i]})
            ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=False)
            return list(ids)
        conv = fastchat_conversation().get_conv_template(self.template)
        for i, question in enumerate(questions):
            conv.append_message(conv.roles[0], question)
            conv.append_message(conv.roles[1], answers[i] if i < len(answers) else None)
        return self.tokenizer(conv.get_prompt()).input_ids

    def answer_text(self, output_ids: Sequence[int]) -> str:
        return self.tokenizer.decode(output_ids, skip_special_tokens=True).strip()
