"""Agent Lightning 1.0.2's trainer-side batch builder, ``agentlightning/verl/rollout_adapter.py``, run as shipped.

That module imports torch, tensordict and verl, which the test environment does not install (CPU-only CI; torch alone
is hundreds of megabytes and verl pulls in a training stack). It is loaded here with small NumPy stand-ins for exactly
the tensor operations it uses (``LongTensor``, ``cat``, ``zeros``, ``from_numpy(...).to(dtype=uint8)``, indexing,
...), so every line of Agent Lightning's own code runs: its R3 check (``R3 requires routed_experts for rollout``),
its merge of a rollout's triplets into training rows, and ``_build_routed_experts_batch``. The stand-ins live only in
this test helper and are removed from ``sys.modules`` right after the import.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

import numpy as np

_DTYPES = {"uint8": np.uint8, "long": np.int64, "float32": np.float32, "bfloat16": np.float32, "bool": np.bool_}


class Tensor:
    """A NumPy array with the few tensor methods the adapter calls."""

    def __init__(self, array: Any) -> None:
        self.a = np.asarray(array)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.a.shape)

    @property
    def dtype(self) -> Any:
        return self.a.dtype.type

    device = "cpu"

    def to(self, device: Any = None, dtype: Any = None) -> Tensor:
        return Tensor(self.a if dtype is None else self.a.astype(dtype))

    def unsqueeze(self, dim: int) -> Tensor:
        return Tensor(np.expand_dims(self.a, dim))

    def contiguous(self) -> Tensor:
        return Tensor(np.ascontiguousarray(self.a))

    def numpy(self) -> Any:
        return self.a

    def __len__(self) -> int:
        return len(self.a)

    def __getitem__(self, index: Any) -> Tensor:
        return Tensor(self.a[_raw(index)])

    def __setitem__(self, index: Any, value: Any) -> None:
        self.a[_raw(index)] = _raw(value)

    def __mul__(self, other: Any) -> Tensor:
        return Tensor(self.a * _raw(other))

    def __sub__(self, other: Any) -> Tensor:
        return Tensor(self.a - _raw(other))


def _raw(value: Any) -> Any:
    if isinstance(value, Tensor):
        return value.a
    if isinstance(value, tuple):
        return tuple(_raw(v) for v in value)
    return value


def _torch() -> types.ModuleType:
    torch = types.ModuleType("torch")
    for name, dtype in _DTYPES.items():
        setattr(torch, name, dtype)
    torch.Tensor = Tensor  # type: ignore[attr-defined]
    torch.device = lambda name="cpu": name  # type: ignore[attr-defined]
    torch.LongTensor = lambda data: Tensor(np.array(data, dtype=np.int64))  # type: ignore[attr-defined]
    torch.BoolTensor = lambda data: Tensor(np.array(data, dtype=np.bool_))  # type: ignore[attr-defined]
    torch.tensor = lambda data, dtype=None: Tensor(np.array(data, dtype=dtype))  # type: ignore[attr-defined]
    torch.zeros = lambda shape, dtype=None, device=None: Tensor(np.zeros(shape, dtype=dtype))  # type: ignore[attr-defined]
    torch.zeros_like = lambda t, dtype=None: Tensor(np.zeros_like(_raw(t), dtype=dtype))  # type: ignore[attr-defined]
    torch.arange = lambda n, device=None: Tensor(np.arange(n))  # type: ignore[attr-defined]
    torch.cat = lambda ts, dim=0: Tensor(np.concatenate([_raw(t) for t in ts], axis=dim))  # type: ignore[attr-defined]
    torch.cumsum = lambda t, dim: Tensor(np.cumsum(_raw(t), axis=dim))  # type: ignore[attr-defined]
    torch.clamp = lambda t, min=None: Tensor(np.maximum(_raw(t), min))  # type: ignore[attr-defined]
    torch.argmax = lambda t, dim: Tensor(np.argmax(_raw(t), axis=dim))  # type: ignore[attr-defined]
    torch.from_numpy = lambda a: Tensor(np.array(a))  # type: ignore[attr-defined]
    torch.stack = lambda ts, dim=0: Tensor(np.stack([_raw(t) for t in ts], axis=dim))  # type: ignore[attr-defined]
    return torch


class TensorDict(dict[str, Any]):
    def __init__(self, source: dict[str, Any], batch_size: int) -> None:
        super().__init__(source)
        self.batch_size = batch_size


class DataProto:
    def __init__(self, batch: TensorDict) -> None:
        self.batch = batch
        self.non_tensor_batch: dict[str, Any] = {}


def load_rollout_adapter() -> Any:
    """``agentlightning.verl.rollout_adapter``, imported with the stand-ins (cached after the first call)."""
    name = "agentlightning.verl.rollout_adapter"
    if name in sys.modules:
        return sys.modules[name]
    tensordict = types.ModuleType("tensordict")
    tensordict.TensorDict = TensorDict  # type: ignore[attr-defined]
    verl = types.ModuleType("verl")
    verl.DataProto = DataProto  # type: ignore[attr-defined]
    stand_ins = {"torch": _torch(), "tensordict": tensordict, "verl": verl}
    saved = {key: sys.modules.get(key) for key in stand_ins}
    sys.modules.update(stand_ins)
    try:
        return importlib.import_module(name)
    finally:
        for key, module in saved.items():
            if module is None:
                sys.modules.pop(key, None)
            else:
                sys.modules[key] = module


def train_batch(completed: list[Any], *, require_routed_experts: bool, level: str = "trajectory") -> dict[str, Any]:
    """``RolloutAdapter.get_train_data_batch`` on completed rollouts: the batch's tensors as NumPy arrays."""
    adapter_module = load_rollout_adapter()
    adapter = adapter_module.RolloutAdapter(
        max_prompt_length=4096,
        max_response_length=4096,
        device="cpu",
        pad_token_id=0,
        trace_aggregator_level=level,
        require_routed_experts=require_routed_experts,
    )
    proto, _metrics = adapter.get_train_data_batch(completed)
    return {key: _raw(value) for key, value in proto.batch.items()}
