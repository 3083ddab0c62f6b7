"""attnkit: the Transformer of "Attention Is All You Need" and its family.

The public API, importable from the package itself::

    from attnkit import TransformerConfig, EncoderDecoder, beam_search, load_model

The names are listed once, in ``attnkit/__init__.pyi``: type checkers read
it, and ``lazy_loader`` resolves the same names on first use (PEP 562), so
``import attnkit`` and the ``attnkit`` command stay fast; ``torch`` is
imported by the first model name.
"""

import lazy_loader

__version__ = "0.2.0"

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
