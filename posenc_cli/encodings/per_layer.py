"""PerLayer: an encoding's weights of each layer, only for the layers that use the encoding.

With model.layers some layers attend with another encoding or none; their share of a per-layer
encoding (DeBERTa's projections, FoX's gates, CoPE's tables, …) would never train, yet would
count in the model's parameters and fill its checkpoints, so the model drops them (``keep``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from typing import Any, Generic, TypeVar, cast

from torch import nn

Weights = TypeVar("Weights", bound=nn.Module | nn.Parameter)


class PerLayer(nn.Module, Generic[Weights]):
    """One module or parameter per layer, named by the layer's index: the names a ModuleList
    of every layer has, so checkpoints of models whose layers all use the encoding keep
    their keys."""

    def __init__(self, n_layers: int, make: Callable[[], Weights]) -> None:
        super().__init__()
        for layer in range(n_layers):
            weights = make()
            if isinstance(weights, nn.Parameter):
                self.register_parameter(str(layer), weights)
            else:
                self.add_module(str(layer), weights)

    def __getitem__(self, layer: int) -> Weights:
        return cast(Weights, getattr(self, str(layer)))

    def __len__(self) -> int:
        return len(self.layers)

    def __iter__(self) -> Iterator[Weights]:
        return (self[layer] for layer in self.layers)

    @property
    def layers(self) -> list[int]:
        """The layers whose weights are held, in order."""
        return sorted(int(name) for name in (*self._modules, *self._parameters))

    def keep(self, layers: Collection[int]) -> None:
        """Drop the weights of every layer not in ``layers``."""
        for layer in self.layers:
            if layer not in layers:
                delattr(self, str(layer))

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        """Checkpoints saved before the unused layers were dropped hold their (never trained)
        weights: skip those, so the runs still load."""
        held = {str(layer) for layer in self.layers}
        for key in [k for k in state_dict if k.startswith(prefix)]:
            name = key[len(prefix) :].split(".", 1)[0]
            if name.isdigit() and name not in held:
                del state_dict[key]
        super()._load_from_state_dict(state_dict, prefix, *args)
