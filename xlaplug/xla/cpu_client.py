"""The process's XLA:CPU client (`cpu_backend`): jax's where the process has imported jax,
else jaxlib's own, made as jax makes it -- so that `run --engine xla`, `--reference xla`, MPI
ranks and worker processes run XLA:CPU without importing jax (about 1 s of CPU in a bare
interpreter; 0.3-0.45 s more than what such an xlaplug process loads anyway), and a process
that has jax never holds a second CPU client.  jaxlib's names come from jaxlib_names.
"""
from __future__ import annotations

import functools
import os
import sys

from . import jaxlib_names
from .jaxlib_names import XlaError, xla_message


def cpu_backend(what: str):
    """The process's XLA:CPU client: jax's where this process has imported jax (so that one
    process never holds two CPU clients), else jaxlib's own, made once (`own_cpu_client`);
    once made, it is the one every later call gets, whether jax was imported since or not."""
    if "jax" in sys.modules and not own_cpu_client.cache_info().currsize:
        try:
            return jaxlib_names.get_backend(what)("cpu")
        except RuntimeError as e:
            raise XlaError(f"jax has no 'cpu' platform here: {xla_message(e)}") from None
    jaxlib_names.require_jax(what)
    return own_cpu_client()


def uses_own_client() -> bool:
    """Whether this process runs XLA:CPU on jaxlib's own client (jax is not in it)."""
    return bool(own_cpu_client.cache_info().currsize)


# The client is the process's (XLA:CPU's devices, its FFI handler table, its threads): a
# cache of one, as jax keeps its backends, not state any caller could pass along.
@functools.cache
def own_cpu_client():
    """XLA:CPU's client as jax's make_cpu_client makes it without jax.distributed (no
    distributed client, so no CPU collectives nor transfer server), its options read from
    the JAX_* variables jax's config reads: the device count from JAX_NUM_CPU_DEVICES, else
    XLA_FLAGS' --xla_force_host_platform_device_count (XLA reads it); asynchronous dispatch
    (JAX_CPU_ENABLE_ASYNC_DISPATCH); the topology timeouts.  Then what jax's import does for
    the CPU: its CPU feature check, and jaxlib's LAPACK targets registered."""
    what = "XLA:CPU"
    platforms = os.environ.get("JAX_PLATFORMS", "")
    if platforms and "cpu" not in platforms.lower().split(","):
        raise XlaError(f"jax has no 'cpu' platform here: JAX_PLATFORMS={platforms}")
    jaxlib_names.jaxlib_module("cpu_feature_guard", what).check_cpu_features()
    xc = jaxlib_names.xla_client(what)
    devices = _env_int("JAX_NUM_CPU_DEVICES", -1)
    client = xc.make_cpu_client(
        asynchronous=_env_bool("JAX_CPU_ENABLE_ASYNC_DISPATCH", True),
        num_devices=devices if devices >= 0 else None,
        get_local_topology_timeout_minutes=_env_int(
            "JAX_CPU_GET_LOCAL_TOPOLOGY_TIMEOUT_MINUTES", 2),
        get_global_topology_timeout_minutes=_env_int(
            "JAX_CPU_GET_GLOBAL_TOPOLOGY_TIMEOUT_MINUTES", 5))
    lapack = jaxlib_names.jaxlib_module("lapack", what)  # as jax/_src/lax/linalg.py
    for platform, targets in lapack.registrations().items():
        for name, fn, api_version in targets:
            xc.register_custom_call_target(name, fn, platform, api_version)
    for name in lapack.batch_partitionable_targets():
        xc.register_custom_call_as_batch_partitionable(name)
    return client


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def _env_bool(name: str, default: bool) -> bool:
    """A boolean variable as jax's config reads one."""
    value = os.environ.get(name)
    if value is None:
        return default
    value = value.lower()
    if value in ("y", "yes", "t", "true", "on", "1"):
        return True
    if value in ("n", "no", "f", "false", "off", "0"):
        return False
    raise XlaError(f"invalid truth value {value!r} for environment {name!r}")
