"""Inputs a block actually receives: recorded while the interpreter runs an enclosing morphism.

A block checked on its own gets standard-normal inputs by default. Some blocks are only defined
on the values their context gives them (a Sinkhorn round divides by row sums that are positive
only for the positive matrix the previous round produced), so ``ncdc check --dtype`` feeds each
block the arrays the interpreter passed into it when the enclosing model ran on seeded random
inputs. Leading (batch) dims of a recorded array are taken at index 0. The liveness is recorded too, so a
block with a windowed input is checked with the dead slots the model gives it.
"""
from __future__ import annotations

import numpy as np
from ncdc.ir.env import Env


def record_block_inputs(root, env: Env, seed: int = 0) -> dict[int, list]:
    """``id(block) -> [(values, live or None)]`` for every block ``root`` enters (its first
    entry): the arrays and their liveness (a window's out-of-range slots are dead). Empty when
    ``root`` cannot be evaluated."""
    from ncdc import interpreter

    seen: dict[int, list] = {}

    def on_entry(blk, titles, ins, batch):
        if id(blk) in seen:
            return
        arrays = []
        for v, arr in zip(ins, blk.dom):
            shape = tuple(env.sizes(arr.shape))
            lead = tuple(batch)
            try:
                full = np.broadcast_to(np.asarray(v.values), lead + shape)
                live = None if v.live is None else np.broadcast_to(
                    np.asarray(v.live, dtype=bool), lead + shape)
            except ValueError:
                return
            at = (0,) * len(lead)
            live = None if live is None or live[at].all() else np.array(live[at], order="C")
            arrays.append((np.array(full[at], order="C"), live))
        seen[id(blk)] = arrays

    try:
        run = interpreter.interpret(root, env, stand_in=True, seed=seed)
        inputs = interpreter.random_inputs(root, env, seed)
        tape = interpreter.random_tape(root, env, seed)
        run.evaluate(*inputs, tape=tape, on_entry=on_entry)
    except Exception:  # noqa: BLE001 - no recording: the check falls back to random inputs
        return {}
    return seen


__all__ = ["record_block_inputs"]
