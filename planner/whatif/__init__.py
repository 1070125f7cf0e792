"""What-if studies over finished or future plans: sweeps of scenarios (sweep.py) and goal-seeking (goal.py).

Pure like the rest of the engine. Neither module moves a plan's figures (they expand specs and do arithmetic
on answers), so they live apart from the cost model, outside the files the validation fingerprint covers
(planner/accuracy.py, `number_files`).
"""
