"""One resolved scenario: every default, check and warning of a deployment and its workload grid.

- `groups`: the options in named groups (Deployment, Precision, Speculation, Memory, Sampling), each field's one
  default and unit, and the one mapping of flat keywords onto them (`get_scenario_options`).
- `inputs`: each user input checked and resolved (names, dtypes, drafter, acceptance, memory options).
- `drafting`: trees, self-speculation and draft-head configs as scenario inputs.
- `tree_scenario`: the speculative part of a scenario that drafts a tree (`with_tree`).
- `checks`: the grid size, memory, finite-price and pricing-range checks `build_scenario` applies.
- `builder`: `build_scenario` -> the frozen `Scenario` every front end takes.
"""
