"""numba intrinsics of gang_gemm.py's and conv_chunks.py's loops: a call of a cblas gemm through
its address (ILP64: 64-bit dimensions, int enums), and this thread's MXCSR read and written
(x86-64), so that a gemm on one of numba's threads runs with the FTZ and DAZ bits the
calling thread has (denormals.py: threads keep their own MXCSR); memcpy and memset by
address (the convolution's patch gather).  The loops' cache keys are their texts: a change
here bumps pool_gemm._VERSION and conv_chunks._VERSION."""
from __future__ import annotations

from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from .denormals import DAZ, FTZ

_I32 = ir.IntType(32)


def _mxcsr_fn(builder, name: str):
    fnty = ir.FunctionType(ir.VoidType(), [ir.IntType(8).as_pointer()])
    return builder.module.declare_intrinsic(f"llvm.x86.sse.{name}", fnty=fnty)


@intrinsic
def mxcsr_set(typingctx, value):
    if not isinstance(value, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        slot = cgutils.alloca_once(builder, _I32)
        builder.store(builder.trunc(args[0], ir.IntType(32)) if args[0].type.width > 32
                      else builder.zext(args[0], ir.IntType(32))
                      if args[0].type.width < 32 else args[0], slot)
        builder.call(_mxcsr_fn(builder, "ldmxcsr"), [builder.bitcast(slot, ir.IntType(8).as_pointer())])
        return context.get_dummy_value()
    return types.void(value), codegen


def _swap_mxcsr(builder, new_bits):
    """Loads new_bits(builder, old) into this thread's MXCSR; returns the old value.  The
    slot is in the function's entry block (cgutils.alloca_once): an alloca where the call is
    -- a loop's blocks -- grew the stack by 16 bytes each time (the flushed loops' two per
    block of elements), and a function with such dynamic allocas cannot realign its stack,
    so LLVM spilled 64-byte registers to unaligned slots."""
    i8p = ir.IntType(8).as_pointer()
    slot = cgutils.alloca_once(builder, _I32)
    builder.call(_mxcsr_fn(builder, "stmxcsr"), [builder.bitcast(slot, i8p)])
    old = builder.load(slot)
    builder.store(new_bits(builder, old), slot)
    builder.call(_mxcsr_fn(builder, "ldmxcsr"), [builder.bitcast(slot, i8p)])
    return old


@intrinsic
def flush_on(typingctx):
    """Sets FTZ and DAZ on this thread; returns the MXCSR as it was (for mxcsr_set)."""
    def codegen(context, builder, sig, args):
        return _swap_mxcsr(builder, lambda b, old: b.or_(old, ir.Constant(_I32, FTZ | DAZ)))
    return types.uint32(), codegen


@intrinsic
def ieee(typingctx):
    """Clears FTZ and DAZ on this thread; returns the MXCSR as it was (for mxcsr_set)."""
    def codegen(context, builder, sig, args):
        return _swap_mxcsr(builder, lambda b, old: b.and_(
            old, ir.Constant(_I32, ~(FTZ | DAZ) & 0xFFFFFFFF)))
    return types.uint32(), codegen


@intrinsic
def call_gemm(typingctx, fn, t1, t2, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
    """cblas_?gemm(RowMajor, t1, t2, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) at address
    `fn`; a, b, c are addresses; alpha and beta float32 (sgemm) or float64 (dgemm)."""
    if not isinstance(alpha, types.Float) or alpha != beta:
        return None
    wide = alpha.bitwidth == 64
    ints = (fn, t1, t2, m, n, k, a, lda, b, ldb, c, ldc)
    if not all(isinstance(x, types.Integer) for x in ints):
        return None

    def codegen(context, builder, sig, args):
        i32, i64 = ir.IntType(32), ir.IntType(64)
        ft = ir.DoubleType() if wide else ir.FloatType()
        vp = ir.IntType(8).as_pointer()
        fnty = ir.FunctionType(ir.VoidType(), [i32, i32, i32, i64, i64, i64, ft, vp, i64,
                                               vp, i64, ft, vp, i64])

        def as64(v):
            return builder.sext(v, i64) if v.type.width < 64 else v

        def as32(v):
            return builder.trunc(v, i32) if v.type.width > 32 else v
        (f, x1, x2, mm, nn, kk, al, pa, la, pb, lb, be, pc, lc) = args
        target = builder.inttoptr(as64(f), fnty.as_pointer())
        builder.call(target, [ir.Constant(i32, 101), as32(x1), as32(x2), as64(mm), as64(nn),
                              as64(kk), al, builder.inttoptr(as64(pa), vp), as64(la),
                              builder.inttoptr(as64(pb), vp), as64(lb), be,
                              builder.inttoptr(as64(pc), vp), as64(lc)])
        return context.get_dummy_value()
    sig = types.void(fn, t1, t2, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
    return sig, codegen


@intrinsic
def copy_bytes(typingctx, dst, src, n):
    """memcpy(dst, src, n) at addresses dst, src: a convolution's patch gather copies runs of
    channels with it (conv_chunks.py) -- numba's element loop there did not vectorize (it
    cannot tell the arrays apart): 4.6 ms against 0.95 for a 58 MB gather."""
    if not all(isinstance(v, types.Integer) for v in (dst, src, n)):
        return None

    def codegen(context, builder, sig, args):
        vp = ir.IntType(8).as_pointer()
        d, s = (builder.inttoptr(v, vp) for v in args[:2])
        cgutils.raw_memcpy(builder, d, s, args[2], 1)
        return context.get_dummy_value()
    return types.void(dst, src, n), codegen


@intrinsic
def zero_bytes(typingctx, dst, n):
    """memset(dst, 0, n) at address dst (a patch's taps over padding)."""
    if not all(isinstance(v, types.Integer) for v in (dst, n)):
        return None

    def codegen(context, builder, sig, args):
        cgutils.memset(builder, builder.inttoptr(args[0], ir.IntType(8).as_pointer()),
                       args[1], 0)
        return context.get_dummy_value()
    return types.void(dst, n), codegen
