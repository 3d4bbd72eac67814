"""Random kernels with NV tensor addressing (the "nv" feature family).

Each kernel builds a random 2-D tensor layout (clamp mode, dimensions, optional explicit
strides, slice, clamp value) and optionally a tensor view (permutation, `has_dimensions`,
dimensions, clip), then either loads a 16x16 matrix through it (clipped elements keep a filled
`object`) and stores it plainly, or loads a matrix plainly and stores it through the layout.

Free of undefined behaviour by construction: every address a clamp mode can reach is inside the
buffer; `undefined` layouts keep every accessed coordinate inside the tensor and use no view;
MirrorRepeat dimensions are at least 2; spans and view dimensions are at least 1; stores go
through packed strides, spans of 16 and views without dimensions, so that no two matrix
elements reach one address.
"""
from __future__ import annotations

import random

from .features import Features
from .program import Function, Program, Stmt

CLAMPS = ("undefined", "constant", "clamp_to_edge", "repeat", "mirror_repeat")


class NvGenerator:
    def __init__(self, seed: int, features: Features):
        self.seed = seed
        self.f = features
        self.r = random.Random(seed)

    def kernel(self) -> Program:
        r = self.r
        clamp = r.choice(CLAMPS)
        store = r.random() < 0.4
        d0, d1 = r.randint(2, 40), r.randint(2, 40)
        if clamp == "undefined":               # the whole 16x16 tile inside the tensor
            o0, o1 = r.randint(0, 8), r.randint(0, 8)
            d0, d1 = max(d0, o0 + 16), max(d1, o1 + 16)
        layout = f'pc.nv.tensor_layout(2, "{clamp}").dimension({d0}, {d1})'
        s0, s1 = d1, 1                         # packed strides
        if not store and r.random() < 0.4:
            s1 = r.randint(1, 3)
            if not self.f.has("nv_inner_stride"):     # known driver defect: see features.py
                s1 = 1
            s0 = d1 * s1 + r.randint(0, 8)
            layout += f".stride({s0}, {s1})"
        sliced, span = None, (d0, d1)          # (offset0, span0, offset1, span1)
        if clamp == "undefined":
            sliced = (o0, 16, o1, 16)
        elif store:     # spans of 16: no two elements of the tile wrap onto one address
            sliced = (r.randint(0, d0 + 4), 16, r.randint(0, d1 + 4), 16)
        elif r.random() < 0.7:
            sliced = (r.randint(0, d0 + 4), r.randint(1, 20), r.randint(0, d1 + 4), r.randint(1, 20))
        if sliced:
            span = (sliced[1], sliced[3])
        clamp_value = None
        if clamp == "constant":
            clamp_value = r.choice([0, 0x3C00, 0xC200, 0x7BFF])   # f16 bits
        view, view_dims, clip = None, None, None
        if clamp != "undefined" and r.random() < 0.6:
            perm = r.choice([(0, 1), (1, 0)])
            has_dims = not store and r.random() < 0.5
            view = f"pc.nv.tensor_view(2, {has_dims}, {perm})"
            if has_dims:
                view_dims = (r.randint(1, 24), r.randint(1, 24))
            if r.random() < 0.6:
                clip = (r.randint(0, 6), r.randint(1, 20), r.randint(0, 6), r.randint(1, 20))
        transposed = view is not None and perm == (1, 0)
        if not self.f.has("nv_span_wrap") and ((span[1] == 16 and span[0] < 16) or
                                               (transposed and span[0] == 16 and span[1] < 16)):
            # known driver defect (see features.py): an innermost span equal to the matrix's
            # 16 columns with fewer than 16 rows of span, in the layout's order or the
            # transposing view's. Every draw is made as before; then both spans grow to 16, so
            # that no coordinate wraps.
            span = (16, 16)
            sliced = (sliced[0], 16, sliced[2], 16) if sliced else (0, 16, 0, 16)
        if sliced:
            layout += ".slice({}, {}, {}, {})".format(*sliced)
        if clamp_value is not None:
            layout += f".clamp_value({clamp_value})"
        if view:
            if view_dims:
                view += ".dimension({}, {})".format(*view_dims)
            if clip:
                view += ".clip({}, {}, {}, {})".format(*clip)
        tensor = (d0 - 1) * s0 + (d1 - 1) * s1 + 1
        body = [Stmt(f"lay = {layout}")]
        if view:
            body.append(Stmt(f"view = {view}"))
        via = ", view=view" if view else ""
        if store:
            body.append(Stmt("m = M16.load(X, 0, 16)"))
            body.append(Stmt(f"pc.nv.store_tensor(Out, lay, m{via})"))
            length = {"X": 256, "Out": tensor}
        else:
            body.append(Stmt(f"m = pc.nv.load_tensor(X, lay, M16{via}, object=M16.fill(7.0))"))
            body.append(Stmt("pc.store(Out, 0, m, 16)"))
            length = {"X": tensor, "Out": 256}
        prelude = ["M16 = pc.coopmat[f16, pc.Subgroup, 16, 16, pc.Accumulator]", ""]
        deco = "@pc.kernel(workgroup_size=32, subgroup_size=32"
        deco += ', fp="exact")' if self.f.fp == "exact" else ")"
        sig = "def kern(X: pc.ReadBuffer[f16], Out: pc.Buffer[f16]):"
        return Program(self.seed, self.f.describe(), prelude, [Function(deco, sig, body)], 1,
                       length, {}, {"X": 64})
