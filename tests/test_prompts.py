"""Prompts through FastChat templates (an optional dependency): the template's format when FastChat is
installed, and a one-line install hint when it is not."""

from __future__ import annotations

import sys

import pytest

from specbench.errors import SpecbenchError
from specbench.prompts import PromptBuilder


class RecordingTokenizer:
    """Tokenizes by characters, so the test can read back the exact prompt text."""

    chat_template = None

    def __call__(self, text: str):
        class Encoded:
            input_ids = [ord(c) for c in text]

        return Encoded()


def test_vicuna_template_formats_both_turns():
    pytest.importorskip("fastchat")
    builder = PromptBuilder(RecordingTokenizer(), "vicuna_v1.1")
    text = "".join(map(chr, builder.build(["Hi?", "And then?"], ["Hello."])))
    assert "USER: Hi? ASSISTANT: Hello.</s>USER: And then? ASSISTANT:" in text


def test_unknown_template_is_named():
    pytest.importorskip("fastchat")
    with pytest.raises(SpecbenchError, match="unknown FastChat template 'nosuch'"):
        PromptBuilder(RecordingTokenizer(), "nosuch")


def test_missing_fastchat_gives_the_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "fastchat", None)  # import fails as if not installed
    with pytest.raises(SpecbenchError, match=r"pip install 'specbench\[fastchat\]'"):
        PromptBuilder(RecordingTokenizer(), "vicuna_v1.1")


def test_no_chat_template_and_no_template_is_an_error():
    with pytest.raises(SpecbenchError, match="no chat template; pass --template"):
        PromptBuilder(RecordingTokenizer())
