"""Sequential optimal threshold: O(log n) updates on a crit-bit tree of summaries.

The threshold summary of :mod:`distcal.core.threshold` is an associative
merge over score-ordered segments, so keeping it at every node of a search
tree keyed by score answers "where is the best threshold now?" at the root,
and an update only recomputes the summaries on one leaf-to-root path (the
recursive set merging of "Optimally Efficient Sequential Calibration of
Binary Classifiers to Minimize Classification Error").

The tree is a crit-bit (PATRICIA) tree over 64-bit keys that order like the
scores (IEEE bits with the sign handled). Every internal node has exactly
two children and tests one bit, so the depth is at most 64 whatever the
order of arrival, and about log2(n) for n distinct scores from any
continuous distribution; no rebalancing is ever needed.

Memory layout, because at a million nodes an update is bound by cache
misses, not arithmetic (measured with bench/threshold.py):

* a node's record is 16 doubles (two 64-byte cache lines): its two
  children's summaries side by side, (Z, B, A, A_B) of the left then of the
  right child, Z the sum of z, B the minimum suffix sum (the empty suffix
  included), A the mass of z's terms and A_B that of the best suffix (the
  scale of the ties of :mod:`distcal.core.threshold`), then the offset of
  its own slot in its parent's record. Going up, a node reads its record
  and writes its summary into that slot, which the next step reads (one
  record per level: measured 30% faster than separate link and summary
  arrays at a million nodes);
* where the best suffix starts is found by one descent when asked (a
  node's B came from the right child iff it equals B_right);
* subtree weights and positives, needed only for the confusion at the
  threshold, are brought up to date lazily from a list of pending leaf
  changes, when asked;
* known scores are found through a dict and updated upwards through parent
  links, without a descent; everything is in flat ``array``s, so an update
  allocates no object the garbage collector has to trace.

Written here because no maintained Python package offers an ordered tree
with a user-defined associative merge at its nodes.
"""

from __future__ import annotations

import math
import struct
from array import array

from .threshold import TIE

__all__ = ["SummaryTree", "score_key"]

_INF = math.inf
_PACK = struct.Struct("<d")
_UNPACK = struct.Struct("<Q")
_SIGN = 1 << 63
_MASK = (1 << 64) - 1
_PENDING_MAX = 1 << 20
# A new node's record: empty summaries, no parent yet.
_EMPTY_RECORD = array("d", [0.0] * 8 + [-1.0] + [0.0] * 7)


def score_key(score: float) -> int:
    """A 64-bit integer ordering like ``score`` (-0.0 and 0.0 share one key)."""
    bits: int = _UNPACK.unpack(_PACK.pack(score + 0.0))[0]
    return (~bits) & _MASK if bits & _SIGN else bits | _SIGN


class SummaryTree:
    """Distinct scores with their sums of z, weight and positives.

    Node i: ``link[4i:4i+4]`` = (left, right, parent, side in the parent),
    left = -1 for a leaf; ``crit[i]`` the bit an internal node tests (63 =
    most significant); ``rec[16i:16i+16]`` = (Z, B, A, A_B) of the left and
    the right child, then ``16 parent + 4 side`` (-1 at the root), as
    doubles; ``wp[4i:4i+4]`` = (W, P) of the left and right child (lazy). The
    root's own summary is kept in ``root_z``/``root_b``/``root_a``/``root_ab``
    and ``root_w``/``root_p``.
    """

    def __init__(self) -> None:
        self.root = -1
        self.link = array("q")
        self.crit = array("q")
        self.rec = array("d")
        self.wp = array("d")
        self.score = array("d")  # leaf: its score
        self.key: list[int] = []  # leaf: its key
        self.leaf_of: dict[int, int] = {}
        self.root_z = self.root_b = self.root_a = self.root_ab = 0.0
        self.root_w = self.root_p = 0.0
        self.pending_leaf = array("q")
        self.pending_w = array("d")
        self.pending_p = array("d")
        self.weight_total = 0.0
        self.positives_total = 0.0

    def __len__(self) -> int:
        return len(self.leaf_of)

    def _new_node(self, crit: int, left: int, right: int, key: int, score: float) -> int:
        i = len(self.crit)
        self.link.extend((left, right, -1, 0))
        self.crit.append(crit)
        self.rec.extend(_EMPTY_RECORD)
        self.wp.extend((0.0, 0.0, 0.0, 0.0))
        self.key.append(key)
        self.score.append(score)
        return i

    # -- updates ----------------------------------------------------------
    def add(self, score: float, z: float, mass: float, weight: float, positives: float
            ) -> None:
        """Add (z, the mass of its terms, weight, positives) at ``score``: O(depth),
        depth <= 64, ~log2 n."""
        k = score_key(score)
        i = self.leaf_of.get(k)
        if i is None:
            i = self._insert(k, score + 0.0)
        self.weight_total += weight
        self.positives_total += positives
        self.pending_leaf.append(i)
        self.pending_w.append(weight)
        self.pending_p.append(positives)
        if len(self.pending_leaf) > _PENDING_MAX:
            self._refresh()
        rec = self.rec
        o = rec[16 * i + 8]
        if o < 0.0:  # the leaf is the root
            z, a = self.root_z + z, self.root_a + mass
            self.root_z, self.root_a = z, a
            self.root_b, self.root_ab = (z, a) if z < -TIE * a else (0.0, 0.0)
            return
        # The leaf: its own segment; best suffix itself or empty (empty wins ties).
        o = int(o)
        z, a = rec[o] + z, rec[o + 2] + mass
        rec[o], rec[o + 2] = z, a
        rec[o + 1], rec[o + 3] = (z, a) if z < -TIE * a else (0.0, 0.0)
        # Up to the root: Z = Z_L + Z_R, A = A_L + A_R; B = B_R if B_R <= B_L + Z_R
        # to within TIE times the longer suffix's mass A_B,L + A_R, else B_L + Z_R;
        # written into the node's slot in its parent's record (or the root's).
        o -= o & 15
        while True:
            zr = rec[o + 4]
            br = rec[o + 5]
            ar = rec[o + 6]
            through = rec[o + 1] + zr
            longer = rec[o + 3] + ar
            z = rec[o] + zr
            a = rec[o + 2] + ar
            if br <= through + TIE * longer:
                b, ab = br, rec[o + 7]
            else:
                b, ab = through, longer
            up = rec[o + 8]
            if up < 0.0:
                self.root_z, self.root_b, self.root_a, self.root_ab = z, b, a, ab
                return
            o = int(up)
            rec[o] = z
            rec[o + 1] = b
            rec[o + 2] = a
            rec[o + 3] = ab
            o -= o & 15

    def _insert(self, k: int, score: float) -> int:
        crit, link, key = self.crit, self.link, self.key
        leaf = self._new_node(-1, -1, -1, k, score)
        self.leaf_of[k] = leaf
        if self.root < 0:
            self.root = leaf
            return leaf
        # The leaf sharing the longest prefix with k, then the first differing bit.
        i = self.root
        while crit[i] >= 0:
            i = link[4 * i + ((k >> crit[i]) & 1)]
        bit = (key[i] ^ k).bit_length() - 1
        # The new internal node goes above the first node testing a lower bit.
        child, up, side = self.root, -1, 0
        while crit[child] > bit:
            up = child
            side = (k >> crit[child]) & 1
            child = link[4 * child + side]
        new_side = (k >> bit) & 1
        node = self._new_node(bit, leaf if new_side == 0 else child,
                              child if new_side == 0 else leaf, 0, 0.0)
        # The child's summary moves into the new node's record; the new leaf
        # starts empty (Z = B = 0), which leaves the child's summary unchanged
        # for the slot above, where the new node now stands. Pending weight
        # changes below the child reach the new node when applied, since they
        # walk the parent links as they are then.
        rec, wp = self.rec, self.wp
        if up < 0:
            summary = array("d", (self.root_z, self.root_b, self.root_a, self.root_ab))
            cw, cp = self.root_w, self.root_p
        else:
            o = 16 * up + 4 * side
            summary = rec[o:o + 4]
            o = 4 * up + 2 * side
            cw, cp = wp[o], wp[o + 1]
        o = 16 * node + 4 * (1 - new_side)
        rec[o:o + 4] = summary
        o = 4 * node + 2 * (1 - new_side)
        wp[o], wp[o + 1] = cw, cp
        link[4 * node + 2], link[4 * node + 3] = up, side
        link[4 * child + 2], link[4 * child + 3] = node, 1 - new_side
        link[4 * leaf + 2], link[4 * leaf + 3] = node, new_side
        rec[16 * node + 8] = float(16 * up + 4 * side) if up >= 0 else -1.0
        rec[16 * child + 8] = float(16 * node + 4 * (1 - new_side))
        rec[16 * leaf + 8] = float(16 * node + 4 * new_side)
        if up < 0:
            self.root = node
        else:
            link[4 * up + side] = node
        return leaf

    def _refresh(self) -> None:
        """Apply pending (weight, positives) changes to every summary above their leaves."""
        link, wp = self.link, self.wp
        for i, w, p in zip(self.pending_leaf, self.pending_w, self.pending_p):
            while True:
                parent = link[4 * i + 2]
                if parent < 0:
                    self.root_w += w
                    self.root_p += p
                    break
                o = 4 * parent + 2 * link[4 * i + 3]
                wp[o] += w
                wp[o + 1] += p
                i = parent
        del self.pending_leaf[:], self.pending_w[:], self.pending_p[:]

    # -- queries ----------------------------------------------------------
    def best(self) -> tuple[float, float, float]:
        """(min suffix sum, threshold where it starts (+inf for the empty suffix), the
        suffix's mass)."""
        b = self.root_b
        if self.root < 0 or b == 0.0:
            return (0.0, _INF, 0.0)
        crit, link, rec = self.crit, self.link, self.rec
        i, cur = self.root, b
        # Follow the side each B came from: the right child's B, or the left
        # child's B plus all of the right child.
        while crit[i] >= 0:
            o = 16 * i
            if cur == rec[o + 5]:
                i = link[4 * i + 1]
            else:
                cur = rec[o + 1]
                i = link[4 * i]
        return (b, self.score[i], self.root_ab)

    def total_z(self) -> float:
        return self.root_z

    def total_mass(self) -> float:
        """The mass of z's terms over the distinct scores."""
        return self.root_a

    def sums_at_or_above(self, t: float) -> tuple[float, float]:
        """(weight, positives) of the scores >= t, by one descent: O(depth)."""
        if self.root < 0 or t == _INF:
            return (0.0, 0.0)
        self._refresh()
        k = score_key(t)
        crit, link, wp = self.crit, self.link, self.wp
        i = self.root
        while crit[i] >= 0:
            i = link[4 * i + ((k >> crit[i]) & 1)]
        bit = (self.key[i] ^ k).bit_length() - 1  # -1 when t is a stored score
        w = p = 0.0
        i, sw, sp = self.root, self.root_w, self.root_p  # sums of subtree i
        # Down the common prefix: going left, the whole right subtree lies above k.
        while crit[i] >= 0 and crit[i] > bit:
            o = 4 * i
            if (k >> crit[i]) & 1:
                sw, sp = wp[o + 2], wp[o + 3]
                i = link[o + 1]
            else:
                w += wp[o + 2]
                p += wp[o + 3]
                sw, sp = wp[o], wp[o + 1]
                i = link[o]
        # Subtree i: k itself (a stored score), or keys that first differ from
        # k at ``bit``, all above k when k has that bit clear.
        if bit < 0 or not (k >> bit) & 1:
            w += sw
            p += sp
        return (w, p)
