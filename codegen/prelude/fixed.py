"""Fixed arrays of the spec in generated code: computed by rule (the Engram primes), or data
only the user can supply (loaded, or seeded stand-ins when the module is told ``stand_in``)."""
import warnings

import torch

RELEASED_PRIME_START = 16_000_000


def _is_prime(n):
    if n < 2:
        return False
    if n % 2 == 0:
        return n == 2
    f = 3
    while f * f <= n:
        if n % f == 0:
            return False
        f += 2
    return True


def _next_prime(n):
    n += 1
    while not _is_prime(n):
        n += 1
    return n


def _prev_prime(n):
    n -= 1
    while n >= 2 and not _is_prime(n):
        n -= 1
    return n


def _primes_after(start, count):
    out, p = [], start
    for _ in range(count):
        p = _next_prime(p)
        out.append(p)
    return out


def consecutive_primes(count, total, bound):
    """The Engram primes (docs/format.md §11.12): `count` consecutive primes summing to `total`,
    the ones after 16,000,000 when they do (the released rule), else the unique window of
    consecutive primes with that sum; every prime below `bound`."""
    window = _primes_after(RELEASED_PRIME_START, count)
    if sum(window) != total:
        window = _primes_after(max(1, total // count - 1), count) if count > 0 else []
        s = sum(window)
        while window and s < total:
            nxt = _next_prime(window[-1])
            s += nxt - window.pop(0)
            window.append(nxt)
        while window and s > total and window[0] > 2:
            prv = _prev_prime(window[0])
            s += prv - window.pop()
            window.insert(0, prv)
        if count <= 0 or total < 2 * count or s != total:
            raise ValueError(f"no {count} consecutive primes sum to {total}")
    if window[-1] >= bound:
        raise ValueError(f"prime {window[-1]} is not below the bound {bound}")
    return torch.tensor(window, dtype=torch.long)


def refuse_missing_data(stand_in, names):
    """Construction without the data the spec leaves to the user is refused: the caller either
    loads it (`stand_in="load"`) or wants seeded stand-ins (`stand_in=True`)."""
    if stand_in is not True and stand_in != "load":
        raise ValueError(f"{names}: data the spec leaves to the user (neither learned nor defined "
                         "by the diagram). Construct with stand_in='load' and load it "
                         "(load_state_dict or load_interpreter_params), or with stand_in=True "
                         "for seeded stand-ins")


def fill_user_data(tensor, bound, name, stand_in, odd=False):
    """Data the spec leaves to the user: zeros until loaded, or (`stand_in=True`) seeded
    stand-ins drawn below `bound` (odd ones for hash multipliers), with a warning."""
    if stand_in is not True:
        return tensor.zero_()
    warnings.warn(f"{name}: seeded stand-in values, not the model's data", stacklevel=2)
    gen = torch.Generator().manual_seed(0)
    if odd:
        values = 2 * torch.randint(0, max(bound // 2, 1), tensor.shape, generator=gen) + 1
    else:
        values = torch.randint(0, bound, tensor.shape, generator=gen)
    return tensor.copy_(values)


def require_data(module, names):
    """Refuse to run on user data that was neither loaded nor stood in for."""
    if module.data_missing:
        raise ValueError(f"{names}: data the spec leaves to the user, not loaded yet; load it "
                         "(load_interpreter_params or load_state_dict) or construct the module "
                         "with stand_in=True")


def data_loaded(module, incompatible_keys):
    """load_state_dict hook: the user data is present once no key was missing."""
    if not incompatible_keys.missing_keys:
        module.data_missing = False
