"""Front ends that price a scenario with the step model.

- `speculative`: a speculative step's cost and the speedup.
- `break_even`: the best k among the k that fit, the break-even batch among the batches that fit, its verdict.
- `predict`: one deployment point (`rooflinesim.predict`).
- `sweep`: the vectorised batch x context x k x alpha grid.
- `gridio`: streaming a sweep's grid to CSV / JSON.
"""
