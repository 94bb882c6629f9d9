"""Which routines decompose into core HLO, and with what: routine -> decomposition,
shared by its s/d/c/z targets (the element type comes from the operands); and, for
results unique only up to a sign or phase, the canonical form check-plugins compares."""
from __future__ import annotations

from . import _decomp_eigh as E
from . import _decomp_factor as F
from . import _decomp_geev as G
from . import _decomp_geqp3 as P
from . import _decomp_gtsv as T
from . import _decomp_qr as Q
from . import _decomp_reduce as R
from . import _decomp_svd as S

DECOMPOSED = {"potrf": F.potrf, "trsm": F.trsm, "getrf": F.getrf,
              "geqrf": Q.geqrf, "orgqr": Q.orgqr, "ungqr": Q.orgqr,
              "ormqr": Q.ormqr, "unmqr": Q.ormqr,
              "syevd": E.syevd, "heevd": E.syevd, "gesdd": S.gesdd, "gesvd": S.gesdd,
              "gehrd": R.gehrd, "sytrd": R.sytrd, "hetrd": R.sytrd,
              "gtsv": T.gtsv, "geqp3": P.geqp3, "geev": G.geev}
CANONICAL = {"syevd": E.canonical_eigh, "heevd": E.canonical_eigh,
             "gesdd": S.canonical_svd, "gesvd": S.canonical_svd, "geev": G.canonical_geev}
