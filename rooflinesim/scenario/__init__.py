"""One resolved scenario: every default, check and warning of a deployment and its workload grid.

- `inputs`: each user input checked and resolved (names, dtypes, drafter, acceptance, memory options).
- `builder`: `build_scenario` -> the frozen `Scenario` every front end takes.
"""
