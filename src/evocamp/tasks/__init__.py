"""The built-in domains' task code: the evaluation functions
(:mod:`~evocamp.tasks.functions`), the MuJoCo locomotion tasks
(:mod:`~evocamp.tasks.locomotion`), the MLPs whose weights are a solution
(:mod:`~evocamp.tasks.policies`) and hyperparameter tuning, a training per evaluation
(:mod:`~evocamp.tasks.training`). What each domain is (dimension, measures, bounds,
defaults) is its entry in the catalogue, :mod:`evocamp.catalogue.domains`.
"""
