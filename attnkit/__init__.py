"""attnkit: the Transformer of "Attention Is All You Need" and its family."""

__version__ = "0.1.0"
