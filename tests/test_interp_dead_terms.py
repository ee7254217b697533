"""Dead terms are skipped by selection (docs/format.md §2.4 L1, §16 item 3): an unrouted expert's
NaN or inf never reaches the mixture through its dead gate."""
from __future__ import annotations

import numpy as np
import pytest

from ncdc import interpreter


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("poison", [np.nan, np.inf])
def test_idle_experts_do_not_reach_the_mixture(bundled, poison):
    moe = bundled.block("Mixture of Experts")
    env = bundled.bind("tiny", sizes={"e": 16, "k": 4}).env
    base = interpreter.interpret(moe, env, seed=0)
    params = {key: np.array(v, copy=True) for key, v in base.params.items()}
    bias = np.full(16, -1e3)
    bias[:6] = 4.0  # every token routes among experts 0-5
    params["Mixture of Experts/Expert Gate/bias.weight"] = bias
    x = interpreter.random_inputs(moe, env, 3)[0]
    clean = interpreter.interpret(moe, env, params=params)(x)[0]
    for name in ("W^{G}", "W^{U}", "W^{D}"):
        key = f"Mixture of Experts/Routed Experts/{name}.weight"
        params[key][:, 6:] = poison
    poisoned = interpreter.interpret(moe, env, params=params)(x)[0]
    assert np.isfinite(clean).all()
    assert np.array_equal(poisoned, clean)
