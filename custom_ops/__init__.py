"""Activation codecs; importing this package registers every codec in ``base.REGISTRY``."""
from . import bitmask, dpr, intervalmask, maxpool_index, q8, relumask, signbits, sparse, sparse_adaptive, sz, zfp  # noqa: F401  (import registers the codecs)
from .base import CONTROL_PARAMS, REGISTRY, Codec, checked_params, get_codec, register  # noqa: F401
