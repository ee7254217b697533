"""Inputs a block actually receives: recorded while the interpreter runs an enclosing morphism.

A block checked on its own gets standard-normal inputs by default. Some blocks are only defined
on the values their context gives them (a Sinkhorn round divides by row sums that are positive
only for the positive matrix the previous round produced), so ``ncdc check --dtype`` feeds each
block the arrays the interpreter passed into it when the enclosing model ran on seeded random
inputs. Leading (batch) dims of a recorded array are taken at index 0. The liveness is recorded too, so a
block with a windowed input is checked with the dead slots the model gives it.

Under a reading other than ``faithful`` (``ir/readings.py``) the model runs as that reading
understands it, so a block receives what the read model passes it (pyncd's LayerNorms and ReLUs
upstream). The reading rebuilds the blocks whose operators it changes; they keep their JSON
path, by which the recording is matched back to the spec's own blocks.
"""
from __future__ import annotations

import numpy as np

from ncdc import interpreter
from ncdc.ir.env import Env
from ncdc.ir.morphisms import Block
from ncdc.ir.walk import walk


def record_block_inputs(root, env: Env, seed: int = 0,
                        reading: str = "faithful") -> dict[int, list]:
    """``id(block) -> [(values, live or None)]`` for every block of ``root`` (the spec's own
    objects) that the model, read as ``reading``, enters (its first entry): the arrays and their
    liveness (a window's out-of-range slots are dead). Empty when ``root`` cannot be
    evaluated."""
    seen: dict = {}
    by_path = reading != "faithful"

    def on_entry(blk, titles, ins, batch):
        key = blk.path if by_path else id(blk)
        if key in seen or (by_path and not key):
            return
        arrays = []
        for v, arr in zip(ins, blk.dom, strict=True):
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
        seen[key] = arrays

    try:
        run = interpreter.interpret(root, env, stand_in=True, seed=seed, reading=reading)
        inputs = interpreter.random_inputs(root, env, seed)
        tape = interpreter.random_tape(root, env, seed)
        run.evaluate(*inputs, tape=tape, on_entry=on_entry)
    except Exception:  # noqa: BLE001 - no recording: the check falls back to random inputs
        return {}
    if not by_path:
        return seen
    return {id(s.node): seen[s.node.path] for s in walk(root)
            if isinstance(s.node, Block) and s.node.path in seen}


__all__ = ["record_block_inputs"]
