"""YAML for run configs and ``--set`` values: PyYAML's safe loader with YAML 1.2 numbers.

PyYAML implements YAML 1.1, whose float pattern needs a dot and a signed
exponent: ``1e-3``, ``1E3``, ``5e4`` and ``1.e3`` come back as *strings*, so
``train.lr: 1e-3`` failed as "expected float, got str". ``ConfigLoader``
replaces the float resolver with YAML 1.2's core-schema one, so numbers read
as users write them (``1e-3``, ``1E-3``, ``.5``, ``1_000.5``, ``.inf``,
``.nan``); everything else (ints, ``on``/``off`` booleans, tags) is
``SafeLoader``'s. Nothing here can construct Python objects (safe loading only).
"""

from __future__ import annotations

import re

import yaml

_FLOAT_TAG = "tag:yaml.org,2002:float"
_FLOAT = re.compile(
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?\.[0-9][0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
    re.X,
)


class ConfigLoader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML has no stubs here
    """``yaml.SafeLoader`` that resolves floats by YAML 1.2's rules."""


# A deep copy of the resolver table without the 1.1 float rule (PyYAML's own
# add_implicit_resolver would append to lists shared with SafeLoader).
ConfigLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _FLOAT_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
ConfigLoader.add_implicit_resolver(_FLOAT_TAG, _FLOAT, list("-+0123456789."))


def parse_yaml(text: str) -> object:
    """``yaml.safe_load(text)`` with YAML 1.2 numbers."""
    loader = ConfigLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
