"""A small ChatML tokenizer with SmolLM2's chat template, for the chat and instruction tests."""

from __future__ import annotations

from attnkit.data.pretrained_tokenizer import PretrainedTokenizer

# SmolLM2-135M-Instruct's template, as its GGUF file carries it.
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)
CHAT = [
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "Paris."},
    {"role": "user", "content": "And of Italy?"},
]


def chatml_tokenizer(template: str | None = SMOLLM2_TEMPLATE) -> PretrainedTokenizer:
    """A small byte-level BPE with ChatML's special tokens (ids 0, 1, 2)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(["What is the capital of France? Paris. user assistant"], trainer)
    return PretrainedTokenizer.with_special_skipped(
        tok, pad_id=0, bos_id=1, eos_id=2, unk_id=None, chat_template=template
    )
