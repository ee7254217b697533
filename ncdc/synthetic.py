"""Seeded synthetic weights for a generated module, independent of how it is sharded.

``ncdc run --params synthetic`` draws every learned array from a generator seeded by the seed
and the array's parameter key (the reference interpreter's seeded initialisation,
:func:`ncdc.interpreter.params.init_value`), whole, and the loader then keeps each rank's slice
of it, as from a weights file. So the same seed gives the same weights, and the same outputs,
on any number of processes, and the same weights the interpreter draws for that seed.
"""
from __future__ import annotations


class SyntheticSource:
    """A parameter source (``names``, ``get``, ``expect``, ``close``, as the weights files of
    ``ncdc.checkpoint.files``) whose tensors are the seeded initial values of the learned
    arrays of ``specs`` (interpreter key -> ParamSpec) under ``env``."""

    def __init__(self, specs: dict, env, seed: int):
        self._specs = {k: s for k, s in specs.items() if s is not None and s.learned}
        self._env = env
        self._seed = seed

    def names(self) -> list[str]:
        return sorted(self._specs)

    def get(self, name: str):
        import torch

        from ncdc.interpreter.params import init_value

        return torch.from_numpy(init_value(self._specs[name], self._env, self._seed))

    def describe(self, name: str) -> str:
        return f"synthetic {name!r}"

    def expect(self, names) -> None:
        """Every name is drawn on demand: nothing to check ahead."""

    def close(self) -> None:
        """Nothing is held open."""


__all__ = ["SyntheticSource"]
