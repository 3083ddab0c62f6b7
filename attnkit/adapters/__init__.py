"""Parameter-efficient fine-tuning: LoRA adapters installed by module replacement.

``LoRAConfig`` (rank, alpha, dropout, target roles), ``install_lora`` /
``merge_lora`` (``install.py``), the ``LoRALinear`` module (``lora.py``) and
``targets.py``, which maps the roles every module declares (``attnkit.roles``)
to LoRA's targets.
"""

from attnkit.adapters.config import ROLES, LoRAConfig
from attnkit.adapters.install import (
    adapted_projection,
    adapter_state,
    base_name,
    count_parameters,
    install_lora,
    lora_parameter_names,
    merge_lora,
)
from attnkit.adapters.lora import LoRALinear
from attnkit.adapters.targets import find_targets, roles_present

__all__ = [
    "ROLES",
    "LoRAConfig",
    "LoRALinear",
    "adapted_projection",
    "adapter_state",
    "base_name",
    "count_parameters",
    "find_targets",
    "install_lora",
    "lora_parameter_names",
    "merge_lora",
    "roles_present",
]
