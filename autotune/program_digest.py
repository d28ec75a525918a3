"""Which candidates are the same program, so that each program is built and timed once.

Different configs often compile to the same code: an unroll limit above every loop's
extent does what the next lower one does, a cooperative fetch's vector width may not
apply, a compute-at position may land where another does. Among the 300 fastest configs
the H100 file holds for ResNet-18's conv2d3, 222 were distinct CUDA kernels (224 of 300
on the first conv, 251 on MobileNetV2's conv2d5); on LLVM (the `znver4` file) 42 of the
150 fastest configs of conv2d3 were distinct programs. Timing a twin again measures noise
(same-kernel twins differed by a median 0.5% to 3% on the H100, 1.6% on LLVM), so the
measurer times each program once and answers its twins with that timing.

Two levels, both exact:
- :func:`scheduled_key` before building: the scheduled module's structural hash,
  confirmed by structural equality (a twin here is not even built);
- :func:`program_digest` after building: a hash of the generated code itself (host LLVM
  IR and device source), which also catches schedules that differ only in what lowering
  erases, such as an unroll limit.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

#: LLVM IR names TBAA type nodes after buffers' pointer addresses (``"0x55d1..."``, or
#: ``"0x55d1....w256.b0"`` for a vector access), which differ from build to build of one
#: schedule: the addresses are renamed in order of appearance before hashing.
_POINTER_NAME = re.compile(r'(?<=")0x[0-9a-f]+(?=[".])')


def canonical_source(text: str) -> str:
    """``text`` with build-to-build noise (pointer-named metadata) renamed canonically."""
    names: dict[str, str] = {}
    return _POINTER_NAME.sub(lambda m: names.setdefault(m.group(0), f"p{len(names)}"), text)


def program_digest(built: Any) -> str | None:
    """SHA-256 of every module's generated code in a built program (``tvm.compile``'s
    result or its runtime module): equal digests, the same program. None where some
    module shows no source (a binary-only module), so nothing is taken for a twin."""
    root = getattr(built, "mod", built)
    digest = hashlib.sha256()
    stack, seen = [root], 0
    while stack:
        mod = stack.pop()
        seen += 1
        try:
            source = mod.inspect_source()
        except Exception:  # a module kind that cannot show its code
            return None
        if not source:
            return None
        for part in (mod.kind, canonical_source(source)):
            digest.update(part.encode())
            digest.update(b"\0")
        stack.extend(reversed(list(mod.imports)))
    return digest.hexdigest() if seen else None


def scheduled_key(mod: Any) -> int:
    """The scheduled module's structural hash: equal hashes are candidates for twins,
    which :func:`same_schedule` confirms."""
    import tvm_ffi

    return int(tvm_ffi.structural_hash(mod))


def same_schedule(a: Any, b: Any) -> bool:
    import tvm_ffi

    return bool(tvm_ffi.structural_equal(a, b))


def schedule_twins(mods) -> list[int]:
    """For each module, the position of the first of ``mods`` structurally equal to it
    (its own where none is)."""
    same_as = list(range(len(mods)))
    seen: dict[int, list[int]] = {}
    for i, mod in enumerate(mods):
        bucket = seen.setdefault(scheduled_key(mod), [])
        twin = next((j for j in bucket if same_schedule(mods[j], mod)), None)
        if twin is None:
            bucket.append(i)
        else:
            same_as[i] = twin
    return same_as

