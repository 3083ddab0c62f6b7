"""``attnkit export --to ctranslate2``: CTranslate2's own converter, run on the HF export.

The model goes through ``attnkit.interop.hf.export`` (a ``MarianMTModel``
directory) and then ``ctranslate2.converters.TransformersConverter``.
CTranslate2's Marian loader was written for OPUS-MT models, whose
conventions differ from attnkit's in three ways; each is fixed so that the
converted model computes the same function as the checkpoint:

* **``<pad>`` last.** The loader drops the last vocabulary entry if it is
  ``<pad>`` and always drops the last row of the embeddings and the output
  projection. The HF model written for the converter therefore has its
  vocabulary permuted, ``<pad>`` moved from its attnkit id to the end
  (embedding rows, output rows, tokenizer ids and config ids together);
  dropping it also keeps CTranslate2 from ever generating ``<pad>``.
* **Decoder start.** The loader sets ``start_from_zero_embedding`` (an
  OPUS-MT decoder starts from ``<pad>``, whose embedding is zero); attnkit's
  decoder starts from the ``<s>`` embedding. The converted spec is changed
  back: ``start_from_zero_embedding = False``, ``decoder_start_token = "<s>"``.
* **Source ``</s>``.** CTranslate2 does not append ``</s>`` to the source;
  attnkit sources end with it. The spec's config sets ``add_source_eos``, so
  ``translate_batch`` takes just the tokenizer's pieces.

The output directory holds CTranslate2's ``model.bin``, ``config.json`` and
``shared_vocabulary.json``, plus ``tokenizer.json`` (HF ``tokenizers``
format, ids in the new order, no post-processor) and a ``README.md``.
Beam search: pass ``length_penalty=0`` for attnkit's ``--alpha 0``;
CTranslate2 divides scores by ``len ** length_penalty``, not by GNMT's penalty.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

from attnkit import jsonio
from attnkit.checkpoints import safe_files
from attnkit.checkpoints.loading import LoadedModel
from attnkit.errors import UsageError
from attnkit.interop.hf.export import build_hf_marian, quiet_transformers, write_hf_directory
from attnkit.interop.outdir import staged_directory

_USAGE = """# attnkit Transformer for CTranslate2

Converted by `attnkit export --to ctranslate2` from `{source}` with CTranslate2 {version}'s
`TransformersConverter` (vocabulary order: `<pad>` dropped, decoder starts from `<s>`,
`</s>` appended to sources by CTranslate2 itself).

```python
import ctranslate2, tokenizers
tok = tokenizers.Tokenizer.from_file("{name}/tokenizer.json")
translator = ctranslate2.Translator("{name}")
pieces = [tok.encode(s).tokens for s in ["..."]]
# attnkit translate --alpha 0 == length_penalty=0 (CTranslate2 divides by len**penalty)
results = translator.translate_batch(pieces, beam_size=4, length_penalty=0,
                                     max_decoding_length=256, min_decoding_length=0)
print([tok.decode([tok.token_to_id(t) for t in r.hypotheses[0]]) for r in results])
```
"""


def _need_ctranslate2() -> ModuleType:
    try:
        import ctranslate2
    except ImportError:
        raise UsageError(
            "export --to ctranslate2 needs ctranslate2: pip install 'attnkit[export]'"
        ) from None
    return ctranslate2


def _converter(
    ctranslate2: Any,  # the module: its classes are untyped bases
    hf_dir: Path,
    tokens: dict[str, str],
) -> Any:
    """CTranslate2's converter with the spec fixed after its Marian loader ran."""

    class AttnkitMarianConverter(ctranslate2.converters.TransformersConverter):
        def _load(self) -> object:
            spec = super()._load()
            spec.decoder.start_from_zero_embedding = False
            config = spec.config
            config.bos_token = tokens["bos"]
            config.decoder_start_token = tokens["bos"]
            config.eos_token = tokens["eos"]
            config.unk_token = tokens["unk"]
            config.add_source_eos = True
            return spec

    return AttnkitMarianConverter(str(hf_dir))


def export_ctranslate2(
    loaded: LoadedModel, out: Path, *, overwrite: bool = False, quantization: str | None = None
) -> Path:
    """Convert ``loaded`` into a CTranslate2 model directory ``out``.

    ``quantization``: CTranslate2's weight type (``int8``, ``float16``, ...;
    default: the weights' own float32).
    """
    ctranslate2 = _need_ctranslate2()
    hf, tokenizer_json = build_hf_marian(loaded, pad_last=True)
    tokenizer = loaded.tokenizer
    tokens = {role: tokenizer.id_to_token(getattr(tokenizer, f"{role}_id"))
              for role in ("bos", "eos", "unk")}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="attnkit-ct2-hf-") as scratch:
        hf_dir = Path(scratch)
        write_hf_directory(hf_dir, hf, tokenizer_json, loaded)
        with staged_directory(out, overwrite=overwrite) as tmp:
            with quiet_transformers():
                _converter(ctranslate2, hf_dir, tokens).convert(
                    str(tmp), quantization=quantization, force=True
                )
            plain = dict(tokenizer_json, post_processor=None)  # CTranslate2 adds </s> itself
            safe_files.write_text(tmp / "tokenizer.json", jsonio.dumps(plain, ensure_ascii=False))
            card = _USAGE.format(source=loaded.directory, version=ctranslate2.__version__,
                                 name=Path(out).name)  # fmt: skip
            safe_files.write_text(tmp / "README.md", card)
    return Path(out)
