"""Draft trees: their shape (SGLang / EAGLE-2 dynamic top-k trees, Medusa-style static trees), the expected accepted
length of a tree from per-node acceptance probabilities, and its Monte Carlo.

The acceptance model. A tree node is a draft token; its `rank` is its place among its siblings in the drafter's
order (0 = the drafter's top candidate). Given that a node's parent was accepted, the target's token at the next
position is the rank-r candidate with probability p[d, r] (d = the node's depth - 1), and none of them with
1 - sum_r p[d, r]. At most one sibling can match (the target picks one token), so the accepted path is unique:
verification walks down from the root, following the child that matches, until no child matches. Hence

    P(node v accepted) = prod over the path root -> v of p[depth_u - 1, rank_u]
    E[tokens per step] = 1 + sum over the tree's nodes v of P(v accepted)

(the 1 is the target's own token after the last accepted node: the bonus or the correction). A chain (every node of
rank 0) gives 1 + sum_i a_1...a_i, the chain's formula, and with i.i.d. a the Leviathan et al. sum_{i<=k} a^i.

Rank rates from one rate per depth (what a single alpha or per-depth rates give): p[d, r] = a_d (1 - a_d)^r, i.e.
each further candidate is the target's token with the same conditional rate a_d given that the ones before it
were not. This is the geometric ("each candidate is another try") model; a measured acceptance length of a tree
fits a by bisection (`fit_alpha_to_accept_length`). Where the draft's own confidence orders candidates the same
way, it is also how SGLang's `organize_draft_results` and EAGLE-2 choose the nodes they keep (the top
num_draft_tokens - 1 by path score), so `build_dynamic_tree` keeps the nodes with the highest P(accepted).

Only numpy; the trial axis of Monte Carlo results comes first, as elsewhere in this package.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property

import numpy as np

__all__ = ["DraftTree", "TreeShape", "get_rank_rates", "get_node_probabilities", "expected_accepted_length",
           "sample_accepted_lengths", "build_dynamic_tree", "fit_alpha_to_accept_length", "parse_tree"]

#: no tree beyond these (SGLang's kernels cap num_draft_tokens far below; 1024 keeps every table small)
MAX_TREE_NODES = 1024
MAX_TREE_DEPTH = 64


@dataclass(frozen=True)
class DraftTree:
    """A tree of draft tokens, nodes in breadth-first order (a parent before its children). `parents[i]` is the
    index of node i's parent (-1: a child of the root, the last committed token); `ranks[i]` its sibling rank."""

    parents: tuple[int, ...]
    ranks: tuple[int, ...]

    def __post_init__(self):
        if len(self.parents) != len(self.ranks):
            raise ValueError("a tree needs one parent and one rank per node")
        seen = set()
        for i, (parent, rank) in enumerate(zip(self.parents, self.ranks)):
            if not -1 <= parent < i or rank < 0 or (parent, rank) in seen:
                raise ValueError(f"node {i}: parent {parent} rank {rank} is not a valid tree node")
            seen.add((parent, rank))

    @classmethod
    def chain(cls, k: int) -> "DraftTree":
        return cls(tuple(range(-1, k - 1)), (0,) * k)

    @classmethod
    def from_paths(cls, paths) -> "DraftTree":
        """Medusa's `medusa_choices` form: each path a list of sibling ranks from the root ([0], [1], [0, 0], ...);
        every prefix of a path must itself be a path."""
        paths = sorted({tuple(int(r) for r in p) for p in paths}, key=lambda p: (len(p), p))
        index = {(): -1}
        parents, ranks = [], []
        for path in paths:
            if not path or any(r < 0 for r in path):
                raise ValueError(f"tree path {list(path)}: ranks must be non-negative and the path non-empty")
            if path[:-1] not in index:
                raise ValueError(f"tree path {list(path)} has no parent path {list(path[:-1])}")
            index[path] = len(parents)
            parents.append(index[path[:-1]])
            ranks.append(path[-1])
        return cls(tuple(parents), tuple(ranks))

    @property
    def size(self) -> int:
        """Draft tokens in the tree (the root, the last committed token, not counted)."""
        return len(self.parents)

    @cached_property
    def depths(self) -> np.ndarray:
        depths = np.zeros(self.size, dtype=np.int64)
        for i, parent in enumerate(self.parents):
            depths[i] = 1 if parent < 0 else depths[parent] + 1
        return depths

    @property
    def depth(self) -> int:
        return int(self.depths.max()) if self.size else 0

    @property
    def max_rank(self) -> int:
        return max(self.ranks) if self.size else 0

    @property
    def nodes_per_depth(self) -> tuple[int, ...]:
        return tuple(int(n) for n in np.bincount(self.depths, minlength=self.depth + 1)[1:])

    def get_child_table(self) -> np.ndarray:
        """(size + 1, max_rank + 2): row u + 1 = node u's children by rank (-1: none; row 0 = the root's); the last
        column is always -1 (the "no candidate matched" outcome)."""
        table = np.full((self.size + 1, self.max_rank + 2), -1, dtype=np.int64)
        for i, (parent, rank) in enumerate(zip(self.parents, self.ranks)):
            table[parent + 1, rank] = i
        return table

    def to_paths(self) -> list[list[int]]:
        paths: list[list[int]] = []
        for parent, rank in zip(self.parents, self.ranks):
            paths.append((paths[parent] if parent >= 0 else []) + [rank])
        return paths


def get_rank_rates(alpha_per_depth, max_rank: int) -> np.ndarray:
    """p[d, r] = a_d (1 - a_d)^r for r = 0..max_rank (the geometric rank model of the module docstring)."""
    a = np.asarray(alpha_per_depth, dtype=float).reshape(-1, 1)
    return a * (1.0 - a) ** np.arange(max_rank + 1)


def _check_rates(tree: DraftTree, rank_rates) -> np.ndarray:
    p = np.asarray(rank_rates, dtype=float)
    if p.ndim != 2 or p.shape[0] < tree.depth or p.shape[1] < tree.max_rank + 1:
        raise ValueError(f"rank rates of shape {p.shape} do not cover a tree of depth {tree.depth} and rank "
                         f"{tree.max_rank}")
    if np.any(p < 0) or np.any(p.sum(axis=1) > 1 + 1e-12):
        raise ValueError("rank rates must be >= 0 and sum to at most 1 per depth")
    return p


def get_node_probabilities(tree: DraftTree, rank_rates) -> np.ndarray:
    """P(node accepted) for every node: the product of its path's p[depth - 1, rank]."""
    p = _check_rates(tree, rank_rates)
    prob = np.empty(tree.size)
    for i, (parent, rank) in enumerate(zip(tree.parents, tree.ranks)):
        prob[i] = (1.0 if parent < 0 else prob[parent]) * p[tree.depths[i] - 1, rank]
    return prob


def expected_accepted_length(tree: DraftTree, rank_rates) -> float:
    """E[tokens one verify commits] = 1 + sum of P(node accepted) (the module docstring's exact formula)."""
    return 1.0 + float(get_node_probabilities(tree, rank_rates).sum())


def sample_accepted_lengths(tree: DraftTree, rank_rates, uniform: np.ndarray) -> np.ndarray:
    """Accepted draft tokens per trial from uniform draws of shape (..., tree.depth): at each depth the target's
    token is drawn among the candidate ranks (probabilities p[d, :], the rest "none"); the walk moves to the child of
    that rank when the tree has one, else stops. Vectorised over the leading axes."""
    p = _check_rates(tree, rank_rates)
    depth = tree.depth
    if depth == 0:
        return np.zeros(uniform.shape[:-1], dtype=np.int64)
    table = tree.get_child_table()
    ranks = table.shape[1] - 1
    cumulative = np.cumsum(p[:depth, :ranks], axis=1)  # outcome r < ranks: rank r; r = ranks: none matched
    current = np.zeros(uniform.shape[:-1], dtype=np.int64)  # table row: 0 = the root
    accepted = np.zeros(uniform.shape[:-1], dtype=np.int64)
    alive = np.ones(uniform.shape[:-1], dtype=bool)
    for d in range(depth):
        outcome = (uniform[..., d, None] >= cumulative[d]).sum(axis=-1)
        child = table[current, outcome]
        alive &= child >= 0
        accepted += alive
        current = np.where(alive, child + 1, current)
    return accepted


@dataclass(frozen=True)
class TreeShape:
    """How a drafter builds its tree: dynamic (SGLang / EAGLE-2: `steps` draft forwards, each expanding the `topk`
    best frontier nodes by `topk` children; the `num_draft_tokens - 1` best nodes are verified with the root) or
    static (a fixed tree, Medusa's `medusa_choices`). `num_draft_tokens` counts the root, as SGLang's
    `speculative_num_draft_tokens` does: the verify step is that many tokens wide."""

    steps: int
    topk: int
    num_draft_tokens: int
    static: DraftTree | None = None

    @property
    def tree_tokens(self) -> int:
        return self.num_draft_tokens - 1

    @property
    def max_tree_tokens(self) -> int:
        """The most nodes the shape can verify: the static tree's, or every candidate the dynamic expansion makes."""
        if self.static is not None:
            return self.static.size
        return self.topk + (self.steps - 1) * self.topk * self.topk

    @property
    def draft_widths(self) -> tuple[int, ...]:
        """Tokens per request of each draft forward: the root first, then the expanded frontier (static: the
        nodes of each depth that have children)."""
        if self.static is None:
            return (1,) + (self.topk,) * (self.steps - 1)
        tree = self.static
        parents = np.asarray(tree.parents)
        widths = [1]
        for d in range(1, tree.depth):
            nodes = np.flatnonzero(tree.depths == d)
            widths.append(int(np.isin(nodes, parents).sum()))
        return tuple(widths)

    @property
    def nodes_per_depth_max(self) -> int:
        """The most tree tokens at one depth (1: a chain)."""
        if self.static is not None:
            return max(self.static.nodes_per_depth, default=0)
        return 1 if self.topk == 1 else min(self.tree_tokens, self.topk * self.topk)

    def describe(self) -> str:
        if self.static is not None:
            return f"static tree of {self.static.size} tokens, depth {self.static.depth}"
        return f"tree steps {self.steps}, topk {self.topk}, num_draft_tokens {self.num_draft_tokens}"

    def get_tree(self, rank_rates, tree_tokens: int | None = None) -> DraftTree:
        """The tree verified with `tree_tokens` nodes (default: the shape's): the dynamic expansion's best nodes by
        P(accepted) under `rank_rates`; for a static tree its first nodes in breadth-first order."""
        n = self.tree_tokens if tree_tokens is None else tree_tokens
        if self.static is not None:
            keep = min(n, self.static.size)
            return DraftTree(self.static.parents[:keep], self.static.ranks[:keep])
        return build_dynamic_tree(self.steps, self.topk, n, rank_rates)

    def expected_tokens(self, tree_tokens, rank_rates) -> np.ndarray:
        """E per step for each number of verified tree tokens in `tree_tokens` (0: plain decoding, 1 token)."""
        n = np.asarray(tree_tokens)
        if self.static is not None:
            prob = get_node_probabilities(self.static, rank_rates)
        else:
            prob = _dynamic_candidates(self.steps, self.topk, rank_rates)[2]
        cumulative = np.concatenate([[1.0], 1.0 + np.cumsum(prob)])
        return cumulative[np.minimum(n, prob.size)]


def _dynamic_candidates(steps: int, topk: int, rank_rates) -> tuple[list, list, np.ndarray]:
    """Every candidate EAGLE-2 / SGLang's expansion makes, best first: (parents, ranks, P(accepted)) with parents as
    indices into the same best-first order (a parent always precedes its child: p <= 1 and ties go to the shallower
    node)."""
    p = np.asarray(rank_rates, dtype=float)
    if p.shape[0] < steps or p.shape[1] < topk:
        raise ValueError(f"rank rates of shape {p.shape} do not cover {steps} steps of top-{topk}")
    nodes = []  # (prob, depth, serial, parent serial, rank)
    frontier = [(1.0, -1)]  # (prob, serial) of the nodes expanded next; the root first
    for d in range(steps):
        children = []
        for prob, serial in frontier:
            for r in range(topk):
                children.append((prob * p[d, r], d + 1, len(nodes) + len(children), serial, r))
        nodes.extend(children)
        frontier = [(c[0], c[2]) for c in sorted(children, key=lambda c: (-c[0], c[2]))[:topk]]
    order = sorted(nodes, key=lambda c: (-c[0], c[1], c[2]))
    position = {c[2]: i for i, c in enumerate(order)}
    parents = [-1 if c[3] < 0 else position[c[3]] for c in order]
    return parents, [c[4] for c in order], np.asarray([c[0] for c in order])


def build_dynamic_tree(steps: int, topk: int, tree_tokens: int, rank_rates) -> DraftTree:
    """The tree SGLang verifies for `--speculative-num-steps steps --speculative-eagle-topk topk
    --speculative-num-draft-tokens tree_tokens + 1`, with the drafter's scores taken as P(accepted)."""
    parents, ranks, _ = _dynamic_candidates(steps, topk, rank_rates)
    n = min(tree_tokens, len(parents))
    keep_parents, keep_ranks = parents[:n], ranks[:n]
    # re-index breadth-first so that DraftTree's parent-before-child order is by depth
    depths = []
    for i, parent in enumerate(keep_parents):
        depths.append(1 if parent < 0 else depths[parent] + 1)
    order = sorted(range(n), key=lambda i: (depths[i], i))
    new = {old: new for new, old in enumerate(order)}
    return DraftTree(tuple(-1 if keep_parents[i] < 0 else new[keep_parents[i]] for i in order),
                     tuple(keep_ranks[i] for i in order))


def fit_alpha_to_accept_length(shape: TreeShape, accept_length: float, tree_tokens: int | None = None) -> float:
    """The per-depth rate a (the same at every depth, geometric over ranks) under which `shape` with `tree_tokens`
    nodes has expected accepted length `accept_length`: the smallest such a, found on a grid and refined by
    bisection (E(a) is continuous, 1 at a = 0 and 1 + depth at a = 1)."""
    n = shape.tree_tokens if tree_tokens is None else tree_tokens
    depth = shape.static.depth if shape.static is not None else shape.steps
    ranks = (shape.static.max_rank if shape.static is not None else shape.topk - 1) + 1

    def length(a: float) -> float:
        return float(shape.expected_tokens(n, get_rank_rates(np.full(depth, a), ranks)))

    top = length(1.0)
    if not 1.0 <= accept_length <= top + 1e-9:
        raise ValueError(f"accept length {accept_length:g} is outside [1, {top:g}] for this tree")
    grid = np.linspace(0.0, 1.0, 201)
    values = np.asarray([length(a) for a in grid])
    i = int(np.argmax(values >= accept_length - 1e-12))
    lo, hi = (grid[i - 1], grid[i]) if i > 0 else (0.0, 0.0)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if length(mid) < accept_length else (lo, mid)
    return float(hi)


def parse_tree(text) -> TreeShape:
    """`steps,topk,num_draft_tokens` (SGLang's three flags, e.g. 6,10,60) or a static tree as a JSON list of paths
    (Medusa's medusa_choices, e.g. [[0],[1],[0,0]]). ValueError with a one-line message on anything else."""
    text = str(text).strip()
    if text.startswith("["):
        try:
            paths = json.loads(text)
            tree = DraftTree.from_paths(paths)
        except (json.JSONDecodeError, TypeError) as exc:
            raise ValueError(f"tree {text[:40]!r}: a static tree is a JSON list of paths, e.g. [[0],[1],[0,0]] "
                             f"({exc})") from None
        if not 1 <= tree.size <= MAX_TREE_NODES or tree.depth > MAX_TREE_DEPTH:
            raise ValueError(f"a static tree needs 1..{MAX_TREE_NODES} nodes and depth <= {MAX_TREE_DEPTH}")
        return TreeShape(tree.depth, tree.max_rank + 1, tree.size + 1, tree)
    parts = text.split(",")
    try:
        steps, topk, tokens = (int(x) for x in parts)
    except ValueError:
        raise ValueError(f"tree {text!r}: give steps,topk,num_draft_tokens (SGLang's speculative_num_steps, "
                         "speculative_eagle_topk, speculative_num_draft_tokens) or a JSON list of paths") from None
    if not (1 <= steps <= MAX_TREE_DEPTH and 1 <= topk <= 64 and 2 <= tokens <= MAX_TREE_NODES + 1):
        raise ValueError(f"tree {text!r}: steps in 1..{MAX_TREE_DEPTH}, topk in 1..64 and num_draft_tokens in "
                         f"2..{MAX_TREE_NODES + 1}")
    shape = TreeShape(steps, topk, tokens)
    if shape.tree_tokens > shape.max_tree_tokens:
        raise ValueError(f"tree {text!r}: {steps} steps of top-{topk} make at most {shape.max_tree_tokens} "
                         f"candidates, so num_draft_tokens is at most {shape.max_tree_tokens + 1}")
    return shape
