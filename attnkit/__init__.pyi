# The public API, listed once: type checkers read these imports, and attnkit/__init__.py
# resolves the same names lazily at run time from this file (lazy_loader.attach_stub).
from .attention import MultiHeadAttention as MultiHeadAttention
from .attention import attend as attend
from .checkpoints import load_model as load_model
from .checkpoints import save_checkpoint as save_checkpoint
from .data.tokenizers import BPETokenizer as BPETokenizer
from .data.tokenizers import CharTokenizer as CharTokenizer
from .decoding import StaticCacheStepper as StaticCacheStepper
from .decoding import beam_search as beam_search
from .decoding import generate as generate
from .decoding import greedy_search as greedy_search
from .decoding import sample as sample
from .decoding import stream as stream
from .inference import stepper_for as stepper_for
from .inference import translate_texts as translate_texts
from .models import FAMILIES as FAMILIES
from .models import DecoderOnlyConfig as DecoderOnlyConfig
from .models import DecoderOnlyLM as DecoderOnlyLM
from .models import EncoderDecoder as EncoderDecoder
from .models import EncoderOnlyConfig as EncoderOnlyConfig
from .models import EncoderOnlyModel as EncoderOnlyModel
from .models import RNNSeq2Seq as RNNSeq2Seq
from .models import RNNSeq2SeqConfig as RNNSeq2SeqConfig
from .models import TransformerConfig as TransformerConfig
from .models import VisionTransformer as VisionTransformer
from .models import ViTConfig as ViTConfig
from .models import build_model as build_model
from .models import config_from_dict as config_from_dict
from .quantize import quantize_model as quantize_model

__version__: str
