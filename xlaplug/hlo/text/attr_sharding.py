"""Value parser for `sharding=`: replicated, maximal, manual, unknown, tiled (listed or iota
device assignments), named-mesh, and tuple shardings."""
from __future__ import annotations

from .attr_collectives import _check_iota
from .attr_cursor import _Cursor
from .attr_text import AttrError
from ..attr_types import Sharding


_SHARDING_FLAGS = ("replicated", "maximal", "manual", "unknown", "unreduced")


def _sharding_single(c: _Cursor) -> Sharding:
    """One `{...}` sharding; the cursor is just past its '{'."""
    import math
    open_at = c.i - 1
    c.ws()
    if c.s.startswith(("mesh", "maximal_mesh", "@"), c.i):
        c.i = open_at
        return Sharding("named", text=c.braced())
    flags: set[str] = set()
    device = None
    tile_dims: tuple[int, ...] = ()
    devices = reshape = perm = None
    ltdr = False
    ltd: tuple[str, ...] = ()
    metadata = group = ""
    while not c.eat("}"):
        if c.at_end():
            raise c.err("missing '}' at the end of the sharding")
        at = c.pos()
        w = c.word("a sharding keyword (replicated, maximal, manual, devices=, ...)")
        if w in _SHARDING_FLAGS:
            flags.add(w)
        elif w == "last_tile_dim_replicate":
            ltdr = True
        elif w in ("shard_as", "shard_like"):
            group = f"{w} {c.int('a shard group id')}"
        elif c.eat("="):
            if w == "device":
                device = c.int("a device id after device=")
            elif w == "devices":
                tile_dims = c.ints("[", "]", "the tile assignment dimensions")
                if c.eat("<="):
                    reshape = c.ints("[", "]", "the iota reshape dimensions")
                    if c.eat("T"):
                        perm = c.ints("(", ")", "the iota transpose permutation")
                else:
                    devs = [c.int("a device id")]
                    while c.eat(","):
                        devs.append(c.int("a device id"))
                    devices = tuple(devs)
            elif w == "metadata":
                metadata = c.braced()
            elif w == "last_tile_dims":
                c.expect("{", " to start last_tile_dims")
                types = []
                if not c.eat("}"):
                    while True:
                        at2 = c.pos()
                        ty = c.word("a sharding type")
                        if ty not in ("manual", "replicated", "maximal", "unreduced"):
                            c.i = at2
                            raise c.err(f"unknown sharding type '{ty}' in last_tile_dims "
                                        f"(expected manual, replicated, maximal or unreduced)")
                        types.append(ty)
                        if c.eat("}"):
                            break
                        c.expect(",", " or '}' in last_tile_dims")
                ltd = tuple(types)
            else:
                c.i = at
                raise c.err(f"unknown sharding attribute '{w}=' (expected device=, devices=, "
                            f"metadata= or last_tile_dims=)")
        else:
            c.i = at
            raise c.err(f"unexpected '{w}' in sharding (expected replicated, maximal, manual, "
                        f"unknown, devices=..., last_tile_dim_replicate, ...)")
    where = c.i
    c.i = open_at  # errors about the whole sharding point at its '{'
    result = None
    for flag in _SHARDING_FLAGS:
        if flag in flags:
            if flag == "maximal":
                if device is None:
                    raise c.err("a maximal sharding needs device=N")
                result = Sharding("maximal", device=device, metadata=metadata,
                                  shard_group=group)
            elif device is not None or tile_dims:
                raise c.err(f"{flag} shardings must not assign devices")
            else:
                result = Sharding(flag, metadata=metadata, shard_group=group)
            break
    if result is None:
        if not tile_dims:
            raise c.err("a sharding needs replicated, maximal, manual, unknown or "
                        "devices=[...]")
        if ltdr and ltd:
            raise c.err("last_tile_dim_replicate and last_tile_dims= cannot both be given")
        n = math.prod(tile_dims)
        if reshape is not None:
            try:
                _check_iota(tile_dims, reshape, perm)
            except AttrError as e:
                raise c.err(str(e)) from None
        elif len(devices) != n:
            raise c.err(f"devices=[{','.join(map(str, tile_dims))}] needs {n} device ids, "
                        f"got {len(devices)}")
        result = Sharding("tiled", tile_dims=tile_dims, devices=devices, iota_reshape=reshape,
                          iota_perm=perm, last_tile_dim_replicate=ltdr, last_tile_dims=ltd,
                          metadata=metadata, shard_group=group)
    c.i = where
    return result


def p_sharding(t: str) -> Sharding:
    c = _Cursor(t, "sharding")
    c.expect("{", " to start the sharding")
    c.ws()
    if c.peek("{") or c.peek("}"):  # a tuple sharding, one element per leaf
        elements = []
        if not c.eat("}"):
            while True:
                c.expect("{", " to start a tuple element sharding")
                elements.append(_sharding_single(c))
                if c.eat("}"):
                    break
                c.expect(",", " or '}' between tuple element shardings")
        result = Sharding("tuple", elements=tuple(elements))
    else:
        result = _sharding_single(c)
    c.done()
    return result
