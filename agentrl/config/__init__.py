"""The config toolkit on the ground floor: the strict pydantic base, plug-in settings and registries, problem
reports with their fixes, and the plain sections (model, env, rollout, evaluation, trainer, logging). A section
whose variants are registered plug-ins lives with its registry (``agentrl.engines.config``,
``agentrl.algos.config``); the whole run is assembled above the plug-ins, in ``agentrl.job``.
"""
