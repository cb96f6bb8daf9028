"""Front ends that price a scenario with the step model.

- `speculative`: a speculative step's cost, the speedup, the best k and break-even.
- `predict`: one deployment point (`rooflinesim.predict`).
- `sweep`: the vectorised batch x context x k x alpha grid.
- `gridio`: streaming a sweep's grid to CSV / JSON.
"""
